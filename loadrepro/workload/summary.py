"""What a workload holds, in numbers a person checks before sending it. Pure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

from loadrepro.workload.export import bodies_written
from loadrepro.workload.model import Conversation, Workload
from loadrepro.workload.plan import Plan


@dataclass(frozen=True, slots=True)
class TreeShape:
    """An agent and its subagents, as planned: what the report's per-tree figures are measured over."""

    conversations: tuple[int, ...]  # the agent's first, then its subagents'
    turns: tuple[int, ...]  # each one's planned turns
    joins: tuple[tuple[int, int, tuple[int, ...]], ...]  # (conversation, turn, the subagents that turn waits for)


@dataclass(frozen=True, slots=True)
class WorkloadSummary:
    kind: str
    api: str
    seed: int
    faker_version: str
    calibration_source: str
    conversations: int
    groups: int
    requests: int
    prompt_tokens_p50: int
    prompt_tokens_p95: int
    prompt_tokens_max: int
    prompt_tokens_total: int
    shared_prefix_tokens_total: int  # expected to come from the prefix cache
    max_output_tokens_total: int
    payload_bytes: int | None  # None: not counted (a long trace's bodies are made as they are sent)
    checks: tuple[tuple[int, int, int, int], ...]  # (conversation, turn, expected, counted by the target)
    probe_requests: int = 0
    probe_tokens: int = 0
    origin: str = ""  # where the requests came from (a trace: its file and format)
    trees: tuple[TreeShape, ...] = ()  # agents with subagents (none: no agent spawned any)
    turns: tuple[tuple[int, int], ...] = ()  # (conversation, its planned turns) of each: a tuple, as JSON keeps it


def summarize(plan: Plan) -> WorkloadSummary:
    workload = plan.workload
    requests = workload.requests
    prompts = np.array([r.expected_prompt_tokens for r in requests])
    groups = {c.group for c in workload.conversations if c.group is not None}
    return WorkloadSummary(
        kind=workload.kind, api=workload.api, seed=workload.seed, faker_version=workload.faker_version,
        calibration_source=workload.calibration_source, conversations=len(workload.conversations),
        groups=len(groups), requests=len(requests),
        prompt_tokens_p50=int(np.percentile(prompts, 50)), prompt_tokens_p95=int(np.percentile(prompts, 95)),
        prompt_tokens_max=int(prompts.max()), prompt_tokens_total=int(prompts.sum()),
        shared_prefix_tokens_total=sum(r.shared_prefix_tokens for r in requests),
        max_output_tokens_total=sum(r.max_tokens for r in requests),
        payload_bytes=sum(len(orjson.dumps(r.payload())) for r in requests)
        if bodies_written(workload) == len(requests) else None,
        checks=tuple((c.conversation, c.turn, c.expected, c.actual) for c in plan.checks),
        probe_requests=plan.probe_requests, probe_tokens=plan.probe_tokens, origin=workload.origin,
        trees=_trees(workload), turns=tuple((c.index, len(c.turns)) for c in workload.conversations),
    )


def summary_from_json(data: dict[str, object]) -> WorkloadSummary:
    """A summary as run.json keeps it (its tuples as JSON lists)."""
    fields = dict(data)
    checks = fields.pop("checks", [])
    trees = fields.pop("trees", [])
    turns = fields.pop("turns", [])
    assert isinstance(turns, list), "run.json's summary holds lists"
    assert isinstance(checks, list) and isinstance(trees, list), "run.json's summary holds lists"
    return WorkloadSummary(**fields,  # type: ignore[arg-type]
                           checks=tuple((c[0], c[1], c[2], c[3]) for c in checks),
                           turns=tuple((t[0], t[1]) for t in turns),
                           trees=tuple(TreeShape(tuple(t["conversations"]), tuple(t["turns"]),
                                                 tuple((j[0], j[1], tuple(j[2])) for j in t["joins"])) for t in trees))


def _trees(workload: Workload) -> tuple[TreeShape, ...]:
    """Each agent that spawned subagents, with them and its turns that wait for them."""
    members: dict[int, list[Conversation]] = {}
    for c in workload.conversations:
        if c.tree is not None:
            members.setdefault(c.tree, []).append(c)
    by_index = {c.index: c for c in workload.conversations} if members else {}
    shapes = []
    for root, children in members.items():
        tree = [by_index[root], *children]
        joins = tuple((c.index, t.turn, t.joins) for c in tree for t in c.turns if t.joins)
        shapes.append(TreeShape(tuple(c.index for c in tree), tuple(len(c.turns) for c in tree), joins))
    return tuple(shapes)


def format_summary(s: WorkloadSummary) -> str:
    lines = [
        f"workload   {s.kind} ({s.api} API), seed {s.seed}, faker {s.faker_version}",
        *([f"source     {s.origin}"] if s.origin else []),
        f"requests   {s.requests} in {s.conversations} conversations" + (f", {s.groups} groups" if s.groups else ""),
        f"prompts    p50 {s.prompt_tokens_p50:,} / p95 {s.prompt_tokens_p95:,} / max {s.prompt_tokens_max:,} tokens; "
        f"{s.prompt_tokens_total:,} in all, {s.shared_prefix_tokens_total:,} expected from the prefix cache",
        f"outputs    up to {s.max_output_tokens_total:,} tokens in all",
        "payloads   " + (f"{s.payload_bytes / 1e6:,.1f} MB of JSON" if s.payload_bytes is not None else
                         "not counted (each body is made as its request is sent)"),
        f"tokens     counted with {s.calibration_source}",
    ]
    for conversation, turn, expected, actual in s.checks:
        error = (actual - expected) / expected * 100
        lines.append(f"check      conversation {conversation} turn {turn}: planned {expected:,}, "
                     f"target counts {actual:,} ({error:+.2f}%)")
    return "\n".join(lines)
