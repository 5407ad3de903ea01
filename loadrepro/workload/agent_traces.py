"""WEKA agent traces (`trace_format = "weka"`): one agent's trajectory per line (or per file), its requests with the
hash ids of the blocks they send, and the subagents it spawned with their own requests. Each is read into rows whose
messages are laid out as the format means them:

- an agent's first request: its tools and system prompt (`tool_tokens` + `system_tokens`, whole blocks) as a system
  message, the rest as a user message;
- a later request: the history cut at the longest common prefix of its hash ids and the request before's; the
  recorded reply (`ceil(out / block_size)` blocks) as an assistant message, the rest as the new input. After
  `stop: "tool_use"`, an input of `tool_result` answers the assistant's tool call as a `tool` message (or a plain
  user message, `[workload] trace_tool_messages = "user"`);
- a request that keeps only a prefix of the one before (compaction) sends that prefix, then the new input.

A request is sent at its time `t`, and no sooner than its `think_time` after the answer before it.

A subagent is a session of its own that starts fresh (its tools and system prompt), at its spawn time (its times
counted from the spawn when its first falls before it, absolute otherwise); the parent's
next request waits for it unless it was launched to run on (`status: "async_launched"`). Hash ids are one text
everywhere in their scope: a trace's own (`hash_id_scope: "local"`, the default of the published traces) or the
whole file's ("global").
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadrepro.errors import TraceError
from loadrepro.workload.tokens import SCOPE_BITS
from loadrepro.workload.trace_rows import (
    Segment,
    Skipped,
    TraceRow,
    fail,
    jsonl,
    length,
    number,
    open_trace,
    read_hash_ids,
)

ASYNC = "async_launched"  # a subagent its parent does not wait for
ROUNDING_S = 0.001  # a subagent's first time this much before its spawn is still read as absolute


def _first_t(agent: dict[str, Any], where: str) -> float:
    """The time of an agent's first request (0.0 when it has none or gives none)."""
    requests = agent.get("requests")
    first = requests[0] if isinstance(requests, list) and requests and isinstance(requests[0], dict) else {}
    return number(first, "t", where, optional=True) or 0.0


def weka_traces(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each trace of the file with where it is: one JSON object per line, or the whole file one object (or a list of
    them), as the published traces come."""
    with open_trace(path) as text:
        head = text.read(1 << 16)
    first = head.lstrip().split("\n", 1)[0]
    try:
        orjson.loads(first)
        whole = False
    except orjson.JSONDecodeError:
        whole = True
    if not whole:
        yield from jsonl(path)
        return
    with open_trace(path) as text:
        try:
            data = json.loads(text.read())
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    traces = data if isinstance(data, list) else [data]
    for k, trace in enumerate(traces, 1):
        if not isinstance(trace, dict):
            raise TraceError(f"{path}: trace {k}: a WEKA trace is a JSON object")
        yield (f"{path}" if len(traces) == 1 else f"{path}: trace {k}"), trace


def read_weka(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """Every request of every trace, each trace's rows in time order (its subagents' among its own)."""
    first: int | None = None
    for index, (where, trace) in enumerate(weka_traces(path)):
        block = length(trace, "block_size", where)
        if first is not None and block != first:
            raise fail(where, "block_size", f"{block}; the file's first trace has {first}, and one replay has one "
                       "block size")
        first = block
        yield from _trace_rows(where, trace, index, block, skipped)


def weka_block_size(path: Path) -> int:
    """The block size of the file's traces (its first trace's: every other must have the same)."""
    for where, trace in weka_traces(path):
        return length(trace, "block_size", where)
    raise TraceError(f"trace {path} has no traces")


def _trace_rows(where: str, trace: dict[str, Any], index: int, block: int, skipped: Skipped) -> list[TraceRow]:
    scope = trace.get("hash_id_scope", "local")
    if scope not in ("local", "global"):
        raise fail(where, "hash_id_scope", f"{scope!r}: local or global")
    name = str(trace.get("id", index))
    agent = _Agent(where, f"w{index}:{name}", block, (index << SCOPE_BITS) if scope == "local" else 0, trace)
    rows = agent.rows(skipped)
    rows.sort(key=lambda r: r.timestamp_s or 0.0)  # stable: an agent's own rows keep their order
    return rows


class _Agent:
    """One agent of a trace (the root, or a subagent): its requests as rows of one session."""

    def __init__(self, where: str, session: str, block: int, offset: int, data: dict[str, Any],
                 start_s: float = 0.0, parent: _Agent | None = None) -> None:
        self.where, self.session, self.block, self.offset = where, session, block, offset
        self.data, self.start_s = data, start_s
        # A subagent's times are its spawn's, or counted from it when its first falls before it (the published traces
        # have both): read once for all of them, a millisecond's rounding apart allowed.
        self.shift = start_s if parent is not None and _first_t(data, where) < start_s - ROUNDING_S else 0.0
        self.tree: str = parent.tree if parent is not None else session
        # A subagent's own tools and system prompt, else its parent's: it starts fresh from that prefix.
        tools, system = (number(data, key, where, optional=True) for key in ("tool_tokens", "system_tokens"))
        self.prefix_blocks: int = math.ceil(((tools or 0.0) + (system or 0.0)) / block)
        if parent is not None and tools is None and system is None:
            self.prefix_blocks = parent.prefix_blocks

    def rows(self, skipped: Skipped) -> list[TraceRow]:
        requests = self.data.get("requests")
        if not isinstance(requests, list) or not requests:
            raise fail(self.where, "requests", "missing, empty or not a list")
        rows: list[TraceRow] = []
        children: list[TraceRow] = []
        waiting: list[str] = []  # subagents spawned since this agent's last request: its next one waits for them
        before: TraceRow | None = None
        for k, entry in enumerate(requests, 1):
            where = f"{self.where}: {self.session} request {k}"
            if not isinstance(entry, dict):
                raise fail(where, "requests", "an entry must be a JSON object")
            kind = entry.get("type", "n")
            if kind == "subagent":
                child = self._subagent(where, entry, k)
                spawned = child.rows(skipped)
                children += spawned
                if spawned and entry.get("status") != ASYNC:
                    waiting.append(child.session)
                continue
            if kind not in ("n", "s"):
                skipped.add(f"entries of type {kind!r}", where)
                continue
            row = self._row(where, entry, before, len(rows) + 1, tuple(waiting))
            waiting = []
            rows.append(row)
            before = row
        return rows + children

    def _subagent(self, where: str, entry: dict[str, Any], k: int) -> _Agent:
        t = number(entry, "t", where) or 0.0
        spawn_s = t + self.shift
        agent_id = str(entry.get("agent_id", k))
        return _Agent(where, f"{self.session}::sa:{agent_id}", self.block, self.offset, entry, spawn_s, self)

    def _row(self, where: str, entry: dict[str, Any], before: TraceRow | None, turn: int,
             joins: tuple[str, ...]) -> TraceRow:
        t = number(entry, "t", where) or 0.0
        at = t + self.shift
        ids = read_hash_ids(entry, where)
        if self.offset:
            ids = tuple((np.asarray(ids, dtype=np.int64) + self.offset).tolist())
        inputs = entry.get("input_types") or []
        layout = layout_of(ids, before, self.prefix_blocks, self.block, tool="tool_result" in inputs, turn=turn)
        think = number(entry, "think_time", where, optional=True) or 0.0
        if think < 0:
            raise fail(where, "think_time", f"negative: {think}")
        answer = number(entry, "api_time", where, optional=True) or 0.0
        return TraceRow(where, at, length(entry, "in", where), max(1, length(entry, "out", where, least=0)), ids,
                        self.session, think, max(0.0, answer), messages=None, layout=layout, joins=joins,
                        tree=None if self.tree == self.session else self.tree, stop=str(entry.get("stop") or ""))


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    if b[:len(a)] == a:  # the common case: the request holds all of the one before
        return len(a)
    k = 0
    for x, y in zip(a, b):
        if x != y:
            break
        k += 1
    return k


def _cut(layout: tuple[Segment, ...], blocks: int) -> list[Segment]:
    """The segments that hold the first `blocks` blocks, the last one shortened."""
    kept, left = [], blocks
    for segment in layout:
        if left <= 0 and segment.blocks:
            break
        take = min(segment.blocks, left)
        kept.append(Segment(segment.role, take, segment.call))
        left -= take
    return kept


def layout_of(ids: tuple[int, ...], before: TraceRow | None, prefix_blocks: int, block: int, *, tool: bool,
            turn: int, compacted: bool = False) -> tuple[Segment, ...]:
    """How a request's blocks fall into messages (see the module's docstring). `compacted`: it replaces the history
    after its common prefix with the request before's, even when that prefix is all of it."""
    if before is None or before.layout is None:
        system = min(prefix_blocks, len(ids))
        return (*([Segment("system", system)] if system else []), Segment("user", len(ids) - system))
    shared = _lcp(before.hash_ids, ids)
    kept = list(before.layout) if shared == len(before.hash_ids) else _cut(before.layout, shared)
    new = len(ids) - shared
    if compacted or shared < len(before.hash_ids):  # compaction: the rest of the history was replaced by this input
        return (*kept, Segment("user", new))
    reply = min(new, math.ceil(before.output_length / block))
    if tool and before.stop == "tool_use":
        call = f"call_turn_{turn}"
        return (*kept, Segment("assistant", reply, call), Segment("tool", new - reply, call))
    return (*kept, Segment("assistant", reply), Segment("user", new - reply))
