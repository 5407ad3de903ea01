"""report.json `agents`: each agent tree (an agent and the subagents it spawned) as it ran: completed or not, its
makespan (from its first request sent to its last answer), its fan-out, and how long its turns waited for their
subagents. Measured over the records kept (a soak keeps its first ones)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from loadrepro.records import Outcome, RequestRecord
from loadrepro.schema.report_sections import AgentsInfo
from loadrepro.workload.summary import TreeShape


def agents_info(records: Iterable[RequestRecord], trees: tuple[TreeShape, ...]) -> AgentsInfo | None:
    if not trees:
        return None
    by_turn = {(r.conversation, r.turn): r for r in records}
    last_end: dict[int, int] = {}  # each conversation's latest answer
    for (conversation, _), r in by_turn.items():
        last_end[conversation] = max(last_end.get(conversation, 0), r.end_ns)
    makespans, waits, completed = [], [], 0
    for tree in trees:
        mine = [by_turn[(c, t)] for c, turns in zip(tree.conversations, tree.turns) for t in range(1, turns + 1)
                if (c, t) in by_turn]
        whole = len(mine) == sum(tree.turns)
        completed += whole and all(r.outcome is Outcome.OK for r in mine)
        sent = [r.sent_ns for r in mine if r.sent_ns is not None]
        if whole and sent:
            makespans.append((max(r.end_ns for r in mine) - min(sent)) / 1e9)
        waits += [w for w in (_waited(by_turn, last_end, join) for join in tree.joins) if w is not None]
    return AgentsInfo(
        trees=len(trees), completed=completed,
        subagents=sum(len(t.conversations) - 1 for t in trees),
        fanout_max=max(len(t.conversations) - 1 for t in trees),
        makespan_s_p50=_percentile(makespans, 50), makespan_s_p95=_percentile(makespans, 95),
        joins=len(waits), join_wait_s_total=round(sum(waits), 3), join_wait_s_max=round(max(waits, default=0.0), 3))


def _waited(by_turn: dict[tuple[int, int], RequestRecord], last_end: dict[int, int],
            join: tuple[int, int, tuple[int, ...]]) -> float | None:
    """How long a turn waited for its subagents after the agent's turn before it answered (None: none ran)."""
    conversation, turn, children = join
    before = by_turn.get((conversation, turn - 1))
    ends = [last_end[c] for c in children if c in last_end]
    if before is None or not ends:
        return None
    return max(0.0, (max(ends) - before.end_ns) / 1e9)


def _percentile(values: list[float], q: int) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None
