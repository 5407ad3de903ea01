"""`trace inspect`: what a trace holds, read as a stream: requests, sessions, span, arrival rate, input and output
lengths, and the prompt tokens a perfect prefix cache could serve (blocks, or messages, seen earlier in it)."""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadrepro.schema.report_sections import TokenSpread
from loadrepro.workload.tokens import TokenCounter
from loadrepro.workload.trace import SeenPrefixes
from loadrepro.workload.trace_formats import detect, format_block_tokens, read_rows
from loadrepro.workload.trace_rows import Skipped, TraceRow, gzipped


class AgentStats(BaseModel):
    """An agent trace's shape (weka)."""

    model_config = ConfigDict(frozen=True)
    trees: int = Field(description="Sessions that are no one's subagent (or branch), each with those it started.")
    subagents: int = Field(description="Subagents (sessions an agent spawned; a dag's forks and spawns).")
    joins: int = Field(description="Times an agent's request waits for a subagent to end.")
    tool_turns: int = Field(description="Requests whose input answers the tool call the reply before made.")
    compactions: int = Field(description="Requests that keep only a prefix of the request before (compaction).")


class _AgentCount:
    def __init__(self) -> None:
        self.roots: set[str] = set()
        self.subagents: set[str] = set()
        self.joins = self.tool_turns = self.compactions = 0
        self.agentic = False

    def add(self, row: TraceRow, continues: bool) -> None:
        """One row; `continues`: its session had a row before. An agent trace's rows have a layout (weka) or
        branches (dag)."""
        if row.session is None:
            return
        (self.subagents if row.tree is not None else self.roots).add(row.session)
        self.joins += len(row.joins)
        if row.layout is not None:
            self.agentic = True
            self.tool_turns += row.layout[-1].role == "tool"
            self.compactions += continues and (len(row.layout) < 2 or row.layout[-2].role != "assistant")

    def stats(self) -> AgentStats | None:
        if not self.agentic and not self.subagents:
            return None
        return AgentStats(trees=len(self.roots), subagents=len(self.subagents), joins=self.joins,
                          tool_turns=self.tool_turns, compactions=self.compactions)


class TraceStats(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str = Field(description="The trace file.")
    format: str = Field(description="Its format.")
    detected: str = Field(description="Why auto chose the format (empty when it was given).")
    requests: int = Field(description="Requests in the trace (rows left out on purpose not counted).")
    sessions: int = Field(description="Sessions of more than one turn.")
    turns_in_sessions: int = Field(description="Requests that belong to a session of more than one turn.")
    span_s: float = Field(description="From the first timestamp to the last, seconds (0: none recorded).")
    arrival_rate: float = Field(description="Requests per second over the span (0: no span).")
    input_tokens: TokenSpread = Field(description="Prompt lengths in tokens.")
    input_tokens_total: int = Field(description="Prompt tokens over every request.")
    output_tokens: TokenSpread = Field(description="Output lengths in tokens.")
    block_tokens: int = Field(description="Tokens per hash id (0: the format has none; text is compared by message).")
    cacheable_tokens: int = Field(
        description="Prompt tokens a perfect prefix cache could serve: blocks (or messages) seen earlier in the trace.")
    cacheable_share: float = Field(description="cacheable_tokens over all prompt tokens.")
    cacheable_own_tokens: int = Field(
        0, description="Of cacheable_tokens, those its own agent tree (or session) had sent before; the rest only "
        "other trees had: a prefix shared across them (a WEKA trace's global hash_id_scope, a common system prompt).")
    lengths_counted_with: str = Field(description="How a text trace's lengths were counted ('' for token traces).")
    skipped: str = Field(description="Rows left out on purpose and why.")
    agents: AgentStats | None = Field(None, description="An agent trace's trees, subagents, joins, tool turns and "
                                      "compactions (None: not an agent trace).")


def _spread(values: array[int]) -> TokenSpread:
    if not len(values):
        return TokenSpread(p50=0, p95=0, max=0)
    data = np.frombuffer(values, dtype=np.int64)
    return TokenSpread(p50=int(np.percentile(data, 50, method="lower")),
                       p95=int(np.percentile(data, 95, method="lower")), max=int(data.max()))


async def _lengths(row: TraceRow, seen: SeenPrefixes, own: SeenPrefixes | None, block: int,
                   counter: TokenCounter) -> tuple[int, int, int, int]:
    """(input, output, cacheable, of which its own tree's) tokens of one row; `own`: what its tree (or session) sent
    before (None: a request of its own)."""
    prefixes = SeenPrefixes.of(row)
    shared, mine = seen.shared(prefixes), own.shared(prefixes) if own is not None else 0
    if row.messages is None:
        return (row.input_length, row.output_length, min(shared * block, row.input_length),
                min(mine * block, row.input_length))
    messages = [dict(m) for m in row.messages]
    common = shared
    prompt = row.input_length or await counter.count_chat(messages)
    cacheable = min(await counter.count_chat(messages[:common]), prompt) if common else 0
    own_tokens = cacheable if mine >= common else min(await counter.count_chat(messages[:mine]), prompt) if mine else 0
    output = row.output_length or max(1, await counter.count_text(row.answer or ""))
    return prompt, output, cacheable, own_tokens


async def inspect_trace(path: Path, trace_format: str, block_tokens: int, counter: TokenCounter) -> TraceStats:
    """The trace's numbers; memory grows with its requests' lengths (8 bytes each) and distinct prefixes, not its
    text."""
    skipped = Skipped()
    chosen, rows = read_rows(path, trace_format, skipped)
    block = block_tokens or format_block_tokens(chosen, path)
    seen, inputs, outputs = SeenPrefixes(), array("q"), array("q")
    sessions: dict[str, int] = {}
    first = last = None
    cacheable = own = 0
    trees: dict[str, SeenPrefixes] = {}  # what each tree (or session) sent: memory grows with its prefixes
    agents = _AgentCount()
    for row in rows:
        root = row.tree or row.session
        prompt, output, cached, mine = await _lengths(
            row, seen, trees.setdefault(root, SeenPrefixes()) if root is not None else None, block, counter)
        inputs.append(prompt)
        outputs.append(output)
        cacheable += cached
        own += mine
        agents.add(row, row.session in sessions)
        if row.session is not None:
            sessions[row.session] = sessions.get(row.session, 0) + 1
        if row.timestamp_s is not None:
            first = row.timestamp_s if first is None else min(first, row.timestamp_s)
            last = row.timestamp_s if last is None else max(last, row.timestamp_s)
    span = (last - first) if first is not None and last is not None else 0.0
    multi = [n for n in sessions.values() if n > 1]
    total_in = sum(inputs)
    return TraceStats(
        path=str(path), format=chosen,
        detected=detect(path)[1] if trace_format == "auto" else ("gzip-compressed" if gzipped(path) else ""),
        requests=len(inputs), sessions=len(multi), turns_in_sessions=sum(multi), span_s=round(span, 3),
        arrival_rate=round(len(inputs) / span, 4) if span > 0 else 0.0, input_tokens=_spread(inputs),
        input_tokens_total=total_in,
        output_tokens=_spread(outputs), block_tokens=block, cacheable_tokens=cacheable,
        cacheable_share=round(cacheable / total_in, 4) if total_in else 0.0, cacheable_own_tokens=own,
        lengths_counted_with=counter.source if chosen in ("sharegpt", "openai-log") else "",
        skipped=skipped.describe(), agents=agents.stats())


def describe_stats(s: TraceStats) -> list[str]:
    how = f" (detected: {s.detected})" if s.detected else ""
    lines = [f"trace      {s.path}: {s.format}{how}",
             f"requests   {s.requests:,}, {s.turns_in_sessions:,} of them in {s.sessions:,} multi-turn sessions",
             f"span       {s.span_s:,.1f} s" + (f", {s.arrival_rate:,.2f} requests/s" if s.span_s else
                                                  " (no timestamps: sent as the load allows)"),
             f"input      p50 {s.input_tokens.p50:,} / p95 {s.input_tokens.p95:,} / max {s.input_tokens.max:,} tokens; "
             f"{s.input_tokens_total:,} in all",
             f"output     p50 {s.output_tokens.p50:,} / p95 {s.output_tokens.p95:,} / max {s.output_tokens.max:,} "
             "tokens",
             f"prefix     {s.cacheable_tokens:,} prompt tokens ({s.cacheable_share:.0%}) a perfect prefix cache could "
             "serve " + (f"(blocks of {s.block_tokens} tokens seen earlier)" if s.block_tokens else
                         "(messages seen earlier in the same order)"),
             f"reuse      {s.cacheable_own_tokens:,} of them its own tree or session sent before, "
             f"{s.cacheable_tokens - s.cacheable_own_tokens:,} only other trees"]
    if s.agents is not None:
        a = s.agents
        lines.append(f"agents     {a.trees:,} trees, {a.subagents:,} subagents ({a.joins:,} joins), {a.tool_turns:,} "
                     f"tool turns, {a.compactions:,} compactions")
    if s.lengths_counted_with:
        lines.append(f"tokens     counted with {s.lengths_counted_with}")
    if s.skipped:
        lines.append(f"left out   {s.skipped}")
    return lines
