"""[workload] trajectory_start: a trace's trees started part-way through, as an agent fleet is found running, not
as it boots. Each tree (a root session and the subagents of its tree) gets a point drawn from the seed in its span;
its rows before the point are left out, except the last one of each session that goes on past it, a warm-up that
carries the session's whole history so far (so the engine holds that prefix when the session's next turn comes).
Pure: rows in, rows out."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from loadrepro.workload.trace_rows import TraceRow

_START = 13  # SeedSequence stream, apart from the others of the workload
WARM_TOKENS = 1  # a warm-up asks for one token: its prompt is what fills the cache


@dataclass(frozen=True, slots=True)
class Started:
    """The rows to replay and the warm-ups to send before them, each still naming its session."""

    rows: tuple[TraceRow, ...]
    warmups: tuple[TraceRow, ...]
    left_out: int  # rows before the points that are not sent (the warm-ups not counted)


def tree_of(row: TraceRow, j: int) -> str:
    """The tree a row is in: its root session's name (a request of no session is a tree of its own)."""
    return row.tree or row.session or f"\0row {j}"


def mid_trajectory(rows: tuple[TraceRow, ...], low: float, high: float, seed: int) -> Started:
    if not high:
        return Started(rows, (), 0)
    trees: dict[str, list[int]] = {}
    for j, row in enumerate(rows):
        trees.setdefault(tree_of(row, j), []).append(j)
    rng = np.random.default_rng([seed, _START])
    cut: dict[int, tuple[float, float]] = {}  # row -> (its position, the tree's shift of its times)
    points: dict[str, float] = {}
    for name, members in trees.items():  # in order of their first row: the draws do not depend on a dict's order
        positions = _positions(rows, members)
        first, last = min(positions), max(positions)
        point = first + float(rng.uniform(low, high)) * (last - first)
        points[name] = point
        timed = all(rows[j].timestamp_s is not None for j in members)
        for j, at in zip(members, positions):
            cut[j] = (at, point - first if timed else 0.0)
    return _started(rows, cut, points)


def _positions(rows: tuple[TraceRow, ...], members: list[int]) -> list[float]:
    """Where each row of a tree is in it: its recorded time when every row has one, else its place in the tree's
    order (agent sessions, dag_jsonl: a subagent's rows follow the turn that spawned it)."""
    if all(rows[j].timestamp_s is not None for j in members):
        return [float(rows[j].timestamp_s or 0.0) for j in members]
    return [float(k) for k in range(len(members))]


def _started(rows: tuple[TraceRow, ...], cut: dict[int, tuple[float, float]], points: dict[str, float]) -> Started:
    before: dict[str, list[int]] = {}  # each session's rows before its tree's point
    goes_on: set[str] = set()  # the sessions with rows at or after it
    for j, row in enumerate(rows):
        session = row.session or f"\0row {j}"
        if cut[j][0] < points[tree_of(row, j)]:
            before.setdefault(session, []).append(j)
        else:
            goes_on.add(session)
    dropped = {s: len(js) for s, js in before.items()}
    gone = {s for s in before if s not in goes_on}  # sessions that ended before the point
    warm = [before[s][-1] for s in before if s in goes_on]
    kept = tuple(_kept(rows[j], cut[j][1], dropped, gone) for j in range(len(rows))
                 if cut[j][0] >= points[tree_of(rows[j], j)])
    warmups = tuple(_warmup(rows[j]) for j in sorted(warm))
    return Started(kept, warmups, sum(dropped.values()) - len(warm))


def _kept(row: TraceRow, shift_s: float, dropped: dict[str, int], gone: set[str]) -> TraceRow:
    """A row after its tree's point: its time moved back by the shift (the tree begins where it began), the
    subagents it joins that ended before the point no longer waited for, and a spawn by a turn left out made at
    its session's start."""
    joins = tuple(s for s in row.joins if s not in gone)
    spawned_by = row.spawned_by
    if spawned_by is not None:
        parent, turn = spawned_by
        spawned_by = None if parent in gone else (parent, max(0, turn - dropped.get(parent, 0)))
    at = None if row.timestamp_s is None else row.timestamp_s - shift_s
    return dataclasses.replace(row, timestamp_s=at, joins=joins, spawned_by=spawned_by,
                               tree=None if row.tree in gone else row.tree)


def _warmup(row: TraceRow) -> TraceRow:
    """The request that fills the cache with a session's history: its own prompt, one token asked, sent before
    the load, on its own (no time, no joins, no spawns; its recorded history, not a live one)."""
    return dataclasses.replace(row, timestamp_s=None, output_length=WARM_TOKENS, delay_s=0.0, joins=(),
                               spawned_by=None, tail=None, forked=False)
