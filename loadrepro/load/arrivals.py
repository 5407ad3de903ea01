"""When each request of a workload is sent: conversations in order inside, concurrent across, at most
`concurrency` requests in flight, started by a closed loop, an open load's shape (Poisson, bursts, a rate series,
a zigzag: load/shapes.py) or a trace's timestamps; a soak (`duration_s` > 0) keeps starting conversations, cycling
through the workload's, until the run stops it.
`max_rps` caps request starts per second whatever the arrival process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiolimiter import AsyncLimiter

from loadrepro.config.profile import LoadSpec
from loadrepro.load.client import Client
from loadrepro.load.live import LiveState
from loadrepro.load.pause import pause
from loadrepro.load.shapes import start_offsets
from loadrepro.records import Outcome, RequestRecord
from loadrepro.workload.model import Conversation, PlannedRequest, Workload

_CANCEL = 11  # SeedSequence stream (arrival times: load/shapes.py)
ABORT_WAIT_S = 10.0  # how long an abort burst waits for answers to be under way before it cancels what is in flight
ABORT_QUIET_S = 2.0  # once one is, how long without another beginning (an engine of fewer slots than the burst)


@dataclass(slots=True)
class _Flight:
    began: int = 0  # 0 until its first token arrived; then the how-manyth answer of the run to begin


class Arrivals:
    """Sends the workload until it is done or `stopped` is set; a request already sent finishes (or is cancelled
    with the task that runs this)."""

    def __init__(self, load: LoadSpec, workload: Workload, seed: int, client: Client, live: LiveState,
                 stopped: asyncio.Event, on_record: Callable[[RequestRecord], None],
                 clock: Callable[[], int] = time.perf_counter_ns, stream: int | None = None,
                 streams: int = 1, starts: Any = None) -> None:
        """`stream` names one worker's share of a run spread over `streams` processes: its random draws (Poisson
        arrivals, cancel points) come from their own stream of the seed, so workers do not arrive in lockstep,
        and its request ids are stream + 1, stream + 1 + streams, ... so no two workers use one. `starts` (with
        an `acquire()`) replaces the max_rps limiter, for one shared by several processes."""
        self._load, self._workload, self._seed, self._client = load, workload, seed, client
        self._streams = () if stream is None else (stream,)
        self._worker = None if stream is None else (stream, streams)
        self._live, self._stopped, self._on_record, self._clock = live, stopped, on_record, clock
        self._slots = asyncio.Semaphore(request_slots(load, workload))
        # concurrency_unit = "session": sessions (trees) begun and not ended, each started once one ends
        self._trees = asyncio.Semaphore(load.concurrency) if load.concurrency_unit == "session" else None
        self._sending: dict[asyncio.Task[RequestRecord], _Flight] = {}  # requests in flight, oldest first
        self._began = asyncio.Event()  # an answer's first token arrived
        self._answers = 0  # answers begun so far: orders the requests in flight by when their answer began
        self._streaming: bool | None = None  # whether any request streams; found at the first abort burst
        self._ids = itertools.count(1 + (stream or 0), streams)
        self._cancel_rng = np.random.default_rng([seed, _CANCEL, *self._streams])
        # A bucket of one start refilled every 1/max_rps s: starts are spaced, so no one-second window holds more
        # than max_rps of them (a bucket of max_rps would let a burst of max_rps through, then max_rps more).
        self._starts = starts or (AsyncLimiter(1, 1 / load.max_rps) if load.max_rps else None)
        # Agent traces: the subagents that ended, and the waits of the turns that join one not ended yet, each by
        # its conversation and the pass of the trace (a soak replays it shifted)
        self._ended: set[tuple[int, float]] = set()
        self._joiners: dict[tuple[int, float], asyncio.Event] = {}
        # Agent sessions: the subagents each agent's turn spawns once answered; the others start by themselves.
        self._spawned: dict[tuple[int, int], list[Conversation]] = {}
        for c in workload.conversations:
            if c.spawned_by is not None:
                self._spawned.setdefault(c.spawned_by, []).append(c)
        self._started_alone = tuple(c for c in workload.conversations if c.spawned_by is None) if self._spawned \
            else workload.conversations
        self._tg: asyncio.TaskGroup | None = None

    async def run(self) -> None:
        conversations = self._started_alone
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            if self._load.duration_s and self._timed_trace():
                await self._trace_passes(tg)
            elif self._load.duration_s:
                await self._soak(tg)
            elif self._load.arrival != "closed" and not self._timed_trace():
                # conversations, agent sessions and a trace without times: as a soak starts them (a trace's own
                # times come first)
                await self._start_at(tg, zip(self._offsets(), conversations))
            elif self._workload.kind != "conversations":
                await self._start_at(tg, self._trace_starts())
            else:
                for c in conversations:
                    await self._start(tg, c, 0.0)

    async def _start(self, tg: asyncio.TaskGroup, conversation: Conversation, shift_s: float) -> None:
        """A conversation (an agent, with the subagents it spawns) started now, or with concurrency in sessions once
        fewer than that many are under way."""
        if self._trees is None:
            tg.create_task(self._conversation(conversation, shift_s))
            return
        await self._trees.acquire()

        async def session() -> None:
            try:
                await self._conversation(conversation, shift_s)
            finally:
                assert self._trees is not None
                self._trees.release()

        tg.create_task(session())

    def _cancel_point(self, planned: PlannedRequest) -> int | None:
        if self._load.cancel_fraction <= 0 or self._cancel_rng.random() >= self._load.cancel_fraction:
            return None
        return int(self._cancel_rng.integers(1, max(2, planned.max_tokens)))

    async def _send(self, planned: PlannedRequest, text_out: list[str] | None = None) -> RequestRecord:
        request_id, queued_ns, wall = next(self._ids), self._clock(), time.time()
        cancel_after = self._cancel_point(planned) if self._load.duration_s else None
        self._live.queued += 1
        try:
            await self._slots.acquire()
        except asyncio.CancelledError:
            self._live.queued -= 1
            self._on_record(self._client.unsent(request_id, planned, queued_ns, wall))
            raise
        if self._starts is not None:
            try:
                await self._starts.acquire()
            except asyncio.CancelledError:
                self._live.queued -= 1
                self._slots.release()
                self._on_record(self._client.unsent(request_id, planned, queued_ns, wall))
                raise
        self._live.queued -= 1
        self._live.in_flight += 1
        at_target = self._client.config.replica_of(request_id, planned.conversation) == 0
        self._live.at_target += at_target
        ended: list[RequestRecord] = []

        def on_record(record: RequestRecord) -> None:
            ended.append(record)
            self._on_record(record)

        flight = _Flight()

        def began() -> None:
            if planned.max_tokens > 1:  # a one-token answer ends with its first token: never cancelled mid-answer
                self._answers += 1
                flight.began = self._answers
                self._began.set()

        send = asyncio.create_task(self._client.send(request_id, planned, queued_ns, wall, on_record, cancel_after,
                                                     text_out, began))
        self._sending[send] = flight
        try:
            return await send
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if ended and current is not None and not current.cancelling():  # aborted on purpose: not this task
                return ended[-1]
            raise
        finally:
            self._sending.pop(send, None)
            self._live.in_flight -= 1
            self._live.at_target -= at_target
            self._slots.release()

    @property
    def _any_stream(self) -> bool:
        """Whether any request streams: a workload of whole answers only ([workload] stream = false) has no answer
        an abort burst could wait for. Looked up once (a trace may hold a million requests)."""
        if self._streaming is None:
            self._streaming = any(turn.stream for c in self._workload.conversations for turn in c.turns)
        return self._streaming

    async def abort(self, count: int) -> tuple[int, int]:
        """Cancel `count` requests at once as clients that leave mid-answer do: those whose answer is under way, the
        latest to begin first, once that many are (or as many as the concurrency allows), waiting at most
        ABORT_WAIT_S, and once one is, no more than ABORT_QUIET_S without another beginning; the oldest of the rest
        in flight make up the count (whole answers among them: they never begin). Each ends `cancelled` and its
        conversation stops. How many were cancelled, and how many of them mid-answer. (Why these: a request
        cancelled before its first token may not have reached the engine's running batch, and one about to finish
        may finish before the engine sees its client leave: a defect of aborts would show or not by chance. The
        answer that began last has the most of it to come.)"""
        wanted = min(count, self._load.concurrency) if self._any_stream else 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ABORT_WAIT_S
        while (under_way := sum(f.began > 0 for f in self._sending.values())) < wanted and \
                not self._stopped.is_set():
            self._began.clear()
            left = deadline - loop.time()
            try:
                await asyncio.wait_for(self._began.wait(), min(left, ABORT_QUIET_S) if under_way else left)
            except TimeoutError:
                break
        answering = sorted((f.began, send) for send, f in self._sending.items() if f.began)
        mid_answer = [send for _, send in reversed(answering)][:count]
        rest = [send for send, f in self._sending.items() if not f.began][:count - len(mid_answer)]
        for send in mid_answer + rest:
            send.cancel()
        return len(mid_answer) + len(rest), len(mid_answer)

    async def _conversation(self, conversation: Conversation, shift_s: float = 0.0,
                            inherited: tuple[PlannedRequest, str] | None = None) -> None:
        """Its turns in order, each once the one before it answered; a trace's turn also waits for its think time
        after that answer and for its own (shifted) arrival, whichever comes later, and an agent's turn for the
        subagents it joins to end. A turn of a live history is sent with the engine's own answer to the turn before in
        place of the recorded one."""
        if conversation.tree is not None:  # a soak sends it again: its turns' joins wait for this time's end
            self._ended.discard((conversation.index, shift_s))
        try:
            await self._turns(conversation, shift_s, inherited)
        finally:
            if conversation.tree is not None:  # a subagent: the turns that join it go on
                self._ended.add((conversation.index, shift_s))
                if (waited := self._joiners.pop((conversation.index, shift_s), None)) is not None:
                    waited.set()

    async def _joined(self, joins: tuple[int, ...], shift_s: float) -> bool:
        """Wait until each subagent `joins` names has ended (in this pass of the trace); False if the run stopped
        starting requests first."""
        for index in joins:
            if (index, shift_s) in self._ended:
                continue
            ended = self._joiners.setdefault((index, shift_s), asyncio.Event())
            done = asyncio.ensure_future(ended.wait())
            stopped = asyncio.ensure_future(self._stopped.wait())
            try:
                await asyncio.wait((done, stopped), return_when=asyncio.FIRST_COMPLETED)
            finally:
                done.cancel()
                stopped.cancel()
        return not self._stopped.is_set()

    async def _turns(self, conversation: Conversation, shift_s: float,
                     previous: tuple[PlannedRequest, str] | None) -> None:
        """`previous`: the turn sent before and its answer (a live history; a fork's: its parent's)."""
        self._spawn(conversation, 0, shift_s, None)  # those started with the conversation
        for i, planned in enumerate(conversation.turns):
            if self._stopped.is_set():
                return
            if planned.joins and not await self._joined(planned.joins, shift_s):
                return
            if planned.turn > 1 and planned.delay_s > 0:
                await pause(self._stopped, planned.delay_s)
            if planned.turn > 1 and planned.arrival_s is not None and \
                    not await self._wait_until(planned.arrival_s + shift_s):
                return
            if self._stopped.is_set():
                return
            if planned.live_tail is not None and previous is not None:
                planned = _live(planned, *previous)
            wanted = i + 1 < len(conversation.turns) and conversation.turns[i + 1].live_tail is not None or \
                any(c.forked for c in self._spawned.get((conversation.index, planned.turn), ()))
            text: list[str] | None = [] if wanted else None
            record = await self._send(planned, text)
            if record.outcome is not Outcome.OK:
                return  # later turns extend a history the engine never completed
            previous = (planned, text[0]) if text else None
            self._spawn(conversation, planned.turn, shift_s, previous)

    def _spawn(self, conversation: Conversation, turn: int, shift_s: float,
               answered: tuple[PlannedRequest, str] | None) -> None:
        """The conversations started once `turn` answered (0: as the conversation starts); a fork goes on from that
        turn and its answer."""
        for child in self._spawned.get((conversation.index, turn), ()):
            assert self._tg is not None, "set while the load runs"
            self._tg.create_task(self._conversation(child, shift_s, answered if child.forked else None))

    async def _wait_until(self, offset_s: float) -> bool:
        """Sleep until `offset_s` after the load started; False if the run stopped starting requests first."""
        delay = offset_s - (self._clock() - self._live.started_ns) / 1e9
        if delay > 0:
            await pause(self._stopped, delay)
        return not self._stopped.is_set()

    async def _start_at(self, tg: asyncio.TaskGroup, starts: Iterable[tuple[float, Conversation]],
                        shift_s: float = 0.0) -> None:
        """Each conversation started at its offset (shifted), in order; one whose offset has passed (a trace row
        stamped out of order) at once. A task is made when its conversation starts, not before: a million-row
        trace does not hold a million sleeping tasks."""
        for offset, conversation in starts:
            if not await self._wait_until(offset + shift_s):
                return
            await self._start(tg, conversation, shift_s)

    def _trace_starts(self) -> list[tuple[float, Conversation]]:
        """A trace's conversations by their first turn's arrival (a file not in time order included)."""
        starts = [(c.turns[0].arrival_s or 0.0, c) for c in self._started_alone]
        return sorted(starts, key=lambda start: start[0])

    def _timed_trace(self) -> bool:
        return self._workload.kind != "conversations" and any(c.turns[0].arrival_s for c in self._started_alone)

    async def _trace_passes(self, tg: asyncio.TaskGroup) -> None:
        """A soak longer than its trace replays it again, pass after pass, each shifted by the trace's span (its
        last arrival and a second), until the run stops it: the same bytes each pass."""
        conversations = self._workload.conversations
        span = max(t.arrival_s or 0.0 for c in conversations for t in c.turns) + 1.0
        starts = self._trace_starts()
        for shift in itertools.count(0.0, span):
            if not await self._wait_until(shift):
                return
            await self._start_at(tg, starts, shift)

    def _offsets(self) -> Iterator[float]:
        """Each conversation's start under the load's shape, this worker's share of it."""
        return start_offsets(self._load, self._seed, self._worker)

    async def _soak(self, tg: asyncio.TaskGroup) -> None:
        """Keep conversations going until the run stops them (the duration's deadline is the runner's)."""
        source = itertools.cycle(self._started_alone)
        if self._load.arrival != "closed":
            for offset, conversation in zip(self._offsets(), source):
                if not await self._wait_until(offset):
                    return
                tg.create_task(self._conversation(conversation))
            return

        async def worker() -> None:
            while not self._stopped.is_set():
                await self._conversation(next(source))

        for _ in range(self._load.concurrency):
            tg.create_task(worker())


def request_slots(load: LoadSpec, workload: Workload) -> int:
    """Requests in flight at most: the concurrency, or with concurrency in sessions, as many as the largest sessions
    (an agent and its subagents) can send at once, one each conversation."""
    if load.concurrency_unit == "request":
        return load.concurrency
    sizes = Counter(c.root for c in workload.conversations)
    return max(1, sum(sorted(sizes.values(), reverse=True)[:load.concurrency]))


def _live(planned: PlannedRequest, before: PlannedRequest, answer: str) -> PlannedRequest:
    """The turn with the engine's own answer to the turn before in its history; its planned length no longer
    holds (the answer's is the engine's), so it is not checked against the target's count."""
    messages = [*before.payload()["messages"], {"role": "assistant", "content": answer}, *(planned.live_tail or ())]
    return dataclasses.replace(planned, body={**planned.payload(), "messages": messages}, expected_prompt_tokens=0)
