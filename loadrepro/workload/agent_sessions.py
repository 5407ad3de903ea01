"""Agent sessions from the seed ([workload] kind = "agents", [workload.agents]): rows of the shape an agent trace
has (workload/agent_traces.py), so that they are sent, joined and reported as a replayed agent trace is.

An agent begins with the tools and system prompt every agent shares and its own task; after each answer it calls a
tool, and its next request holds the answer (its recorded length) and the tool's result (seeded lognormal sizes),
sent after the tool's latency. After an answer it may spawn subagents, which start fresh from the shared prompt with
tasks of their own and run in parallel; its next request waits for them. A request that would outgrow the context
limit is compacted: the shared prompt, the task and a summary."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np

from loadrepro.config.agent_spec import AgentSpec
from loadrepro.workload.agent_traces import layout_of
from loadrepro.workload.trace_rows import TraceRow

_AGENTS = 9  # SeedSequence stream, apart from the others of the workload
_P95_Z = 1.6448536269514722  # the standard normal's 95th percentile


class _Draws:
    """The seeded choices: tool results' sizes and whether an answer spawns subagents."""

    def __init__(self, spec: AgentSpec, seed: int) -> None:
        self.spec, self.rng = spec, np.random.default_rng([seed, _AGENTS])
        median, p95 = spec.tool_result_tokens, spec.tool_result_tokens_p95
        self.sigma = math.log(p95 / median) / _P95_Z if p95 else 0.0

    def result_tokens(self) -> int:
        median = self.spec.tool_result_tokens
        return max(1, round(median * math.exp(self.sigma * self.rng.standard_normal()))) if self.sigma else median

    def spawns(self) -> bool:
        return self.spec.subagent_probability > 0 and bool(self.rng.random() < self.spec.subagent_probability)


class _Agents:
    def __init__(self, spec: AgentSpec, seed: int) -> None:
        self.spec, self.draws, self.ids = spec, _Draws(spec, seed), itertools.count(1)
        self.block = spec.block_tokens
        self.system = self._blocks(spec.system_tokens) if spec.system_tokens else ()

    def _blocks(self, tokens: int) -> tuple[int, ...]:
        return tuple(next(self.ids) for _ in range(math.ceil(tokens / self.block)))

    def agent(self, session: str, turns: int, root: str | None = None,
              spawned_by: tuple[str, int] | None = None) -> Iterator[TraceRow]:
        """An agent's requests, each followed by those of the subagents spawned after its answer (a subagent's
        `root` is its agent's session; it spawns none)."""
        spec, task = self.spec, self._blocks(self.spec.task_tokens)
        before: TraceRow | None = None
        waiting: tuple[str, ...] = ()
        for turn in range(1, turns + 1):
            ids, tool, compacted = self.system + task, False, False
            if before is not None:
                ids = before.hash_ids + self._blocks(spec.reply_tokens) + self._blocks(self.draws.result_tokens())
                tool = True
                if spec.context_limit_tokens and len(ids) * self.block > spec.context_limit_tokens:
                    ids, tool, compacted = self.system + task + self._blocks(spec.summary_tokens), False, True
            row = TraceRow(f"{session} request {turn}", 0.0 if before is None and root is None else None,
                           len(ids) * self.block, spec.reply_tokens, ids, session,
                           spec.tool_latency_s if before is not None else 0.0,
                           layout=layout_of(ids, before, len(self.system), self.block, tool=tool, turn=turn,
                                            compacted=compacted),
                           joins=waiting, tree=root, stop="tool_use" if turn < turns else "end_turn",
                           spawned_by=spawned_by if before is None else None)
            yield row
            before, waiting = row, ()
            if root is None and turn < turns and self.draws.spawns():
                waiting = tuple(f"{session}::sa:{turn}.{i}" for i in range(1, spec.subagent_fanout + 1))
                for child in waiting:
                    yield from self.agent(child, spec.subagent_turns, session, (session, turn))


def agent_rows(spec: AgentSpec, seed: int) -> Iterator[TraceRow]:
    """Every agent's requests and its subagents', agent after agent; the same seed, the same rows."""
    agents = _Agents(spec, seed)
    for a in range(spec.agents):
        yield from agents.agent(f"agent-{a + 1}", spec.turns)


def describe_agents(spec: AgentSpec, seed: int, rows: tuple[TraceRow, ...]) -> str:
    """One line: what was generated."""
    subagents = len({r.session for r in rows if r.tree is not None})
    return (f"agents from seed {seed}: {spec.agents} agents of {spec.turns} requests, {subagents} subagents; a "
            f"{spec.system_tokens}-token shared prompt, tool results of {spec.tool_result_tokens} tokens (median)"
            + (f", compacted above {spec.context_limit_tokens} tokens" if spec.context_limit_tokens else ""))
