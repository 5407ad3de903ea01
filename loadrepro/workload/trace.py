"""Trace replay: the rows of any trace format (workload/trace_formats.py) chosen by the profile's window, grouped
into sessions, and turned into requests. Pure once the rows are read.

Token-count rows are built from blocks: each hash id is a fixed block of text that costs exactly the format's
block tokens in the target's tokens (with the newline that joins it to the next), so requests whose hash ids start
alike share a byte-identical prefix of exactly (common blocks x block tokens); a request shorter than its blocks
cuts its last block short, and one longer than them ends with records of its own. Text rows (sharegpt, openai-log)
send their own messages, the recorded history included, so stock and patched receive the same bytes.

A session's turns are one conversation: each is sent at its (scaled) timestamp or its delay after the turn before
it answered, whichever is later, and never before that turn answered.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadrepro.config.workload_spec import TraceFormat, WorkloadSpec
from loadrepro.errors import TraceError
from loadrepro.workload.agent_sessions import agent_rows, describe_agents
from loadrepro.workload.apis import chat_form
from loadrepro.workload.assemble import Assembler
from loadrepro.workload.corpus import FAKER_VERSION
from loadrepro.workload.generation import streams
from loadrepro.workload.model import Conversation, Deferred, PlannedRequest, Workload
from loadrepro.workload.trace_bodies import Bodies, TraceBody, messages_tokens
from loadrepro.workload.trace_formats import detect, format_block_tokens, message_prefixes, read_rows
from loadrepro.workload.trace_rows import Skipped, TraceRow, gzipped
from loadrepro.workload.trajectory import mid_trajectory


@dataclass(frozen=True, slots=True)
class Trace:
    """The rows a profile replays, in file order, with what was chosen and left out."""

    format: TraceFormat
    path: str
    rows: tuple[TraceRow, ...]
    block_tokens: int  # tokens per hash id (0: the format has none)
    skipped: Skipped
    origin_s: float  # the trace's first timestamp: time zero of the replay (before trace_start_s)
    # per row: its leading hash ids (token rows) or messages (text rows) an earlier row also started with: what a
    # perfect prefix cache serves. Counted once when read: every rebuild of the plan (calibration) reuses it.
    common: tuple[int, ...]
    detected: str = ""  # why "auto" chose the format ("" when the profile named it)
    description: str = ""  # what made it, when no file did (agent sessions from the seed)
    # trajectory_start: the warm-ups sent before the load (workload/trajectory.py), their prefixes as `common`
    # has them, and the rows before the trees' points not sent at all
    warmups: tuple[TraceRow, ...] = ()
    warm_common: tuple[int, ...] = ()
    left_out: int = 0
    # agent traces (weka, dag): per row, the part of `common` its own tree had sent before (empty: not counted)
    own_common: tuple[int, ...] = ()

    def describe(self) -> str:
        """One line: the file, its format, what is replayed and what was left out."""
        if self.description:
            return self.description + self.started()
        sessions = len({r.session for r in self.rows if r.session is not None})
        singles = sum(r.session is None for r in self.rows)
        how = f"detected: {self.detected}" if self.detected else "as the profile says"
        line = (f"trace {self.path}: {self.format} ({how}); {len(self.rows)} requests replayed, "
                f"{sessions} sessions" + (f" and {singles} single requests" if singles else ""))
        early = sum(r.timestamp_s is not None and r.timestamp_s < self.origin_s for r in self.rows)
        if early:
            line += f"; {early} stamped before the first row (not in time order), sent at the start"
        return line + (f"; left out: {self.skipped.describe()}" if self.skipped.total else "") + self.started()

    def started(self) -> str:
        if not self.warmups and not self.left_out:
            return ""
        return (f"; mid-trajectory start: {len(self.warmups)} warm-up requests sent before the load (not judged), "
                f"{self.left_out} earlier requests not sent")


_LEAST_BLOCK = 16  # a scaled block keeps room for its own lead text, so blocks stay distinct


def block_tokens(spec: WorkloadSpec, trace_format: str) -> int:
    """The profile's block size, or the format's own when it leaves it at 0, scaled with the lengths."""
    return _scaled_block(spec, spec.trace_block_tokens or format_block_tokens(trace_format, Path(spec.trace)))


def _scaled_block(spec: WorkloadSpec, block: int) -> int:
    if not block or spec.trace_length_percent == 100:
        return block
    return max(_LEAST_BLOCK, round(block * spec.trace_length_percent / 100))


def _scaled(row: TraceRow, percent: int) -> TraceRow:
    """A token-count row with its lengths at `percent` of the trace's (text rows are their own text)."""
    if percent == 100 or row.messages is not None:
        return row
    return dataclasses.replace(row, input_length=max(1, round(row.input_length * percent / 100)),
                               output_length=max(1, round(row.output_length * percent / 100)))


def _origin(rows: Iterator[TraceRow]) -> tuple[float, Iterator[TraceRow]]:
    """Time zero: the first timestamp in the file, and the rows, none consumed. Traces are written in time order;
    reading the file once for it (not twice for the earliest) halves the wait before a large trace's first
    request, and a row stamped earlier is sent at the start (counted in the trace's description)."""
    held = []
    for row in rows:
        held.append(row)
        if row.timestamp_s is not None:
            return row.timestamp_s, itertools.chain(held, rows)
    return 0.0, iter(held)


def _window(rows: Iterator[TraceRow], spec: WorkloadSpec, origin: float) -> Iterator[TraceRow]:
    """The rows of the profile's window: a session is kept when its first turn is; its later turns while they are
    within the window; at most trace_max_requests in all."""
    end = spec.trace_start_s + spec.trace_duration_s if spec.trace_duration_s else float("inf")
    seen: set[str] = set()  # sessions whose first turn has been read
    kept: set[str] = set()  # and of those, the ones replayed
    count = sessions = 0
    for row in rows:
        offset = None if row.timestamp_s is None else max(0.0, row.timestamp_s - origin)
        inside = offset is None or spec.trace_start_s <= offset < end
        if row.session is not None and row.session in seen:
            if row.session not in kept or not inside:
                continue
        else:
            if row.session is not None:
                seen.add(row.session)
            if not inside or spec.trace_max_sessions and sessions >= spec.trace_max_sessions:
                continue
            sessions += 1
            if row.session is not None:
                kept.add(row.session)
        yield row
        count += 1
        if spec.trace_max_requests and count >= spec.trace_max_requests:
            return


def read_trace(spec: WorkloadSpec) -> Trace:
    """The rows the profile replays; TraceError names the file, line and field of anything wrong in it."""
    trace_format, _ = read_rows(spec.trace, spec.trace_format)
    detected = detect(Path(spec.trace))[1] if spec.trace_format == "auto" else (
        "gzip-compressed" if gzipped(Path(spec.trace)) else "")
    skipped = Skipped()
    origin, read = _origin(read_rows(spec.trace, trace_format, skipped)[1])
    rows = tuple(_scaled(row, spec.trace_length_percent) for row in _window(read, spec, origin))
    if not rows:
        window = " in the window asked for" if spec.trace_start_s or spec.trace_duration_s else ""
        raise TraceError(f"trace {spec.trace} has no requests{window}")
    return _started(Trace(trace_format, spec.trace, rows, block_tokens(spec, trace_format), skipped, origin, (),
                          detected), spec)


def agent_trace(spec: WorkloadSpec) -> Trace:
    """Agent sessions from the seed (kind = "agents") as the rows of an agent trace, in the profile's window."""
    rows = tuple(_scaled(row, spec.trace_length_percent) for row in _window(agent_rows(spec.agents, spec.seed), spec,
                                                                              0.0))
    return _started(Trace("weka", "", rows, _scaled_block(spec, spec.agents.block_tokens), Skipped(), 0.0, (),
                          description=describe_agents(spec.agents, spec.seed, rows)), spec)


def _started(trace: Trace, spec: WorkloadSpec) -> Trace:
    """The trace from the trees' points of trajectory_start, and what a perfect prefix cache serves each row: the
    warm-ups go first, so the turn after one finds its history."""
    started = mid_trajectory(trace.rows, *spec.trajectory_start, spec.seed)
    seen = SeenPrefixes()
    trees: dict[str, SeenPrefixes] | None = {} if trace.format in ("weka", "dag") else None

    def common(rows: tuple[TraceRow, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Per row, what any earlier row started with, and (agent traces) what an earlier row of its own tree did."""
        shared, own = [], []
        for row in rows:
            prefixes = SeenPrefixes.of(row)
            shared.append(seen.shared(prefixes))
            if trees is not None:
                tree = row.tree or row.session
                own.append(0 if tree is None else trees.setdefault(tree, SeenPrefixes()).shared(prefixes))
        return tuple(shared), tuple(own)

    warm_common, _ = common(started.warmups)
    replayed, own = common(started.rows)
    return dataclasses.replace(trace, rows=started.rows, common=replayed, warmups=started.warmups,
                               warm_common=warm_common, left_out=started.left_out, own_common=own)


class SeenPrefixes:
    """What a perfect prefix cache would hold after the requests seen so far: every prefix of hash ids (token rows)
    and of messages (text rows, by digest: trace_formats.message_prefixes), so memory does not grow with a
    prefix's length. Hash-id prefixes are kept as running 64-bit hashes.
    Python's own tuple hash is used for hash ids (a million-row trace has tens of millions of prefixes; a
    cryptographic digest each tripled the time to read it): two prefixes colliding by chance among 10^8 is about
    one in a thousand, and would count one block as shared that was not."""

    def __init__(self) -> None:
        self._seen: set[int | bytes] = set()

    @staticmethod
    def of(row: TraceRow) -> list[int] | list[bytes]:
        """A row's prefixes as the sets hold them: made once for a row looked up in more than one set."""
        return message_prefixes(row.messages) if row.messages is not None else _block_prefixes(row.hash_ids)

    def shared(self, prefixes: list[int] | list[bytes]) -> int:
        """How many of a row's leading prefixes (`of`) an earlier row had; the row's are then held too."""
        # Every prefix of every row is kept, so those seen are a leading run: found by bisection, and only the rest
        # added (an agent's request holds its whole history: tens of blocks, most of them seen).
        low, high = 0, len(prefixes)
        while low < high:
            middle = (low + high) // 2
            if prefixes[middle] in self._seen:
                low = middle + 1
            else:
                high = middle
        self._seen.update(itertools.islice(prefixes, low, None))
        return low


def _block_prefixes(hash_ids: tuple[int, ...]) -> list[int]:
    prefixes = list(itertools.accumulate(hash_ids, lambda running, h: hash((running, h)), initial=0))
    del prefixes[0]
    return prefixes


class _Builder:
    """Expected lengths, prefix sharing and live-history tails of a trace's rows, in file order."""

    def __init__(self, trace: Trace, spec: WorkloadSpec, api: str, assembler: Assembler) -> None:
        self.spec, self.chat, self.assembler = spec, chat_form(api), assembler
        self.bodies = Bodies(trace.block_tokens, spec, self.chat, assembler)
        self.block = trace.block_tokens
        self.live = self.recorded = 0  # continuing turns sent with the engine's answers, or as recorded
        c = assembler.calibration
        self.overhead = c.chat_base - c.chat_per_message if self.chat else c.text_base

    def token_row(self, row: TraceRow, common: int) -> tuple[int, int]:
        overhead, sent = self.overhead, row.input_length
        if row.layout is not None:  # every block is sent whole; each message has its template and one join fewer
            c = self.assembler.calibration
            sent = max(sent, len(row.hash_ids) * self.block)
            overhead += (len(row.layout) - 1) * ((c.chat_per_message if self.chat else 0) - c.join_tokens)
        return sent + int(round(overhead)), min(common * self.block, sent)

    def shared(self, row: TraceRow, common: int) -> tuple[int, int]:
        """Its expected prompt tokens, and those of them in the first `common` blocks or messages."""
        return self.text_row(row, common) if row.messages is not None else self.token_row(row, common)

    def text_row(self, row: TraceRow, common: int) -> tuple[int, int]:
        assert row.messages is not None
        c = self.assembler.calibration
        expected = messages_tokens(c, row.messages, self.chat)
        shared = messages_tokens(c, row.messages[:common], self.chat) if common else 0.0
        return int(round(expected)), int(round(min(shared, expected)))

    def body(self, j: int, row: TraceRow, max_tokens: int) -> Deferred:
        return Deferred(TraceBody(self.bodies, j, row, max_tokens))

    def live_tail(self, row: TraceRow, before: TraceRow | None) -> tuple[dict[str, Any], ...] | None:
        """trace_history = "live": what follows the turn before's recorded answer in this turn's messages, when
        they are that turn's messages, one assistant answer, then more (else None: sent as recorded)."""
        if row.tail is not None and self.chat:  # dag_jsonl: always the engine's own answers
            self.live += 1
            return row.tail
        if self.spec.trace_history != "live" or not self.chat or before is None or row.messages is None \
                or before.messages is None:
            return None
        k = len(before.messages)
        if len(row.messages) <= k + 1 or row.messages[:k] != before.messages or \
                row.messages[k].get("role") != "assistant":
            self.recorded += 1
            return None
        self.live += 1
        return tuple(dict(m) for m in row.messages[k + 1:])

    def output_length(self, row: TraceRow) -> int:
        if row.output_length:
            return row.output_length
        return max(1, int(round(self.assembler.calibration.estimate(row.answer or ""))))


def _joined(index: int, turns: list[PlannedRequest], rows: tuple[TraceRow, ...], row_of: dict[tuple[int, int], int],
            sessions: dict[str, list[PlannedRequest]]) -> Conversation:
    """A conversation, an agent trace's with its turns waiting for the subagents they join (those replayed: one the
    window left out is not waited for) and the conversation its tree is named by."""
    def conversation_of(session: str | None) -> int | None:
        found = sessions.get(session) if session is not None else None
        return found[0].conversation if found else None

    if not row_of:
        return Conversation(index, None, tuple(turns))
    first = row_of.get((index, 1))
    spawned = rows[first].spawned_by if first is not None else None
    parent = conversation_of(spawned[0]) if spawned is not None else None
    joined = []
    for turn in turns:
        j = row_of.get((index, turn.turn))
        waits = () if j is None else tuple(c for s in rows[j].joins if (c := conversation_of(s)) is not None)
        joined.append(dataclasses.replace(turn, joins=waits) if waits else turn)
    return Conversation(index, None, tuple(joined), None if first is None else conversation_of(rows[first].tree),
                        None if parent is None or spawned is None else (parent, spawned[1]),
                        first is not None and rows[first].forked)


def _cap(seconds: float, cap_s: float) -> float:
    return min(seconds, cap_s) if cap_s else seconds


def _paced(row: TraceRow, before: TraceRow | None, spec: WorkloadSpec, recorded_s: float | None,
           ) -> tuple[float | None, float]:
    """When a row is sent (trace_pacing): its offset from the start (None: once the turn before answered) and its
    wait after the turn before answered. A session's first turn keeps its recorded time (`recorded_s`)."""
    think = _cap(row.delay_s / spec.trace_speed, spec.trace_idle_cap_s)
    if spec.trace_pacing == "recorded" or before is None:
        return recorded_s, think
    if spec.trace_pacing == "think_only" or row.joins or row.timestamp_s is None or before.timestamp_s is None:
        # a turn that joins subagents waited for them in the recording too: what follows their end is its think time
        return None, think
    gap = max(0.0, row.timestamp_s - before.timestamp_s - before.answer_s)
    return None, _cap(gap / spec.trace_speed, spec.trace_idle_cap_s)


def session_headers(spec: WorkloadSpec, row: TraceRow, j: int) -> tuple[tuple[str, str], ...]:
    """[workload] session_header: the row's session (a request of none: its own) under that name."""
    if not spec.session_header:
        return ()
    return ((spec.session_header, row.session if row.session is not None else f"request-{j}"),)


class _IdleCap:
    """trace_idle_cap_s: every gap between the trace's request starts longer than the cap is cut to it, so an agent
    trace's hours of idle replay in minutes; the order of the starts, and each gap within the cap, stay."""

    def __init__(self, trace: Trace, spec: WorkloadSpec) -> None:
        self._offsets: np.ndarray | None = None
        if not spec.trace_idle_cap_s:
            return
        raw = np.array(sorted({max(0.0, r.timestamp_s - trace.origin_s - spec.trace_start_s) / spec.trace_speed
                               for r in trace.rows if r.timestamp_s is not None}))
        if raw.size:
            gaps = np.minimum(np.diff(raw, prepend=0.0), spec.trace_idle_cap_s)
            self._raw, self._offsets = raw, np.cumsum(gaps)

    def __call__(self, offset: float) -> float:
        if self._offsets is None:
            return offset
        return float(self._offsets[int(np.searchsorted(self._raw, offset))])


def build_trace(trace: Trace, spec: WorkloadSpec, api: str, assembler: Assembler) -> Workload:
    builder = _Builder(trace, spec, api, assembler)
    speed = spec.trace_speed
    capped = _IdleCap(trace, spec)
    sessions: dict[str, list[PlannedRequest]] = {}
    last_row: dict[str, TraceRow] = {}  # each session's latest row
    order: list[list[PlannedRequest]] = []  # each conversation's turns, by first appearance
    row_of: dict[tuple[int, int], int] = {}  # the rows that join or are a subagent's, by conversation and turn
    for j, (row, common) in enumerate(zip(trace.rows, trace.common)):
        expected, shared_tokens = builder.shared(row, common)
        max_tokens = builder.output_length(row)
        turns = sessions.get(row.session) if row.session is not None else None
        if turns is None:
            turns = []
            order.append(turns)
            if row.session is not None:
                sessions[row.session] = turns
        index = turns[0].conversation if turns else len(order) - 1
        before = last_row.get(row.session) if row.session is not None else None
        arrival, delay = _paced(row, before, spec, capped(
            max(0.0, row.timestamp_s - trace.origin_s - spec.trace_start_s) / speed) if row.timestamp_s is not None
            else None)
        tail = builder.live_tail(row, before)
        if row.session is not None:
            last_row[row.session] = row
        turns.append(PlannedRequest(index, len(turns) + 1, builder.body(j, row, max_tokens), max_tokens, expected,
                                    shared_tokens, arrival, delay, tail, streams(spec.stream, spec.seed, (j,)),
                                    own_prefix_tokens=builder.shared(row, trace.own_common[j])[1]
                                    if trace.own_common else None, headers=session_headers(spec, row, j)))
        if row.joins or row.tree is not None:  # agent traces' only: a million-row trace holds none
            row_of[(index, len(turns))] = j
    conversations = tuple(_joined(i, turns, trace.rows, row_of, sessions) for i, turns in enumerate(order))
    warmups = tuple(_warmup(builder, len(trace.rows) + i, row, common, sessions[row.session or ""][0].conversation)
                    for i, (row, common) in enumerate(zip(trace.warmups, trace.warm_common)))
    c = assembler.calibration
    origin = trace.describe()
    if spec.trace_history == "live" or builder.live:
        origin += (f"; live history: {builder.live} turns hold the engine's own answer to the turn before"
                   + (f", {builder.recorded} as recorded (their messages do not extend the turn before and one "
                      "answer)" if builder.recorded else "")
                   + ("" if builder.chat else " (none: a completions prompt is sent as recorded)"))
    return Workload(spec.kind, api, spec.seed, FAKER_VERSION, c.source, conversations, origin, warmups=warmups)


def _warmup(builder: _Builder, j: int, row: TraceRow, common: int, conversation: int) -> PlannedRequest:
    """A warm-up as turn 0 of the conversation whose history it sends (numbered after the replayed rows: its own
    seeds)."""
    expected, shared = builder.shared(row, common)
    return PlannedRequest(conversation, 0, builder.body(j, row, row.output_length), row.output_length, expected,
                          shared, None, 0.0, None, streams(builder.spec.stream, builder.spec.seed, (j,)),
                          headers=session_headers(builder.spec, row, j))

