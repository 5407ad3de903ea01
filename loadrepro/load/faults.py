"""The faults on purpose of one run ([[chaos.events]]), caused at their times beside the load: each kept as it
happens (its span, so that what fails meanwhile is the fault's doing; the restarts that empty the prefix cache),
a fault due while an earlier one has the engine down waiting for it, and one never caused kept with why."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable

from loadrepro.config.profile import WIPES, ChaosEvent
from loadrepro.load.chaos import BACK_POLL_S, ChaosTools, cause
from loadrepro.load.client import Client, ClientConfig
from loadrepro.load.run_target import RunTarget
from loadrepro.load.watch.health_polls import HealthWatcher
from loadrepro.records import Fault, FaultNotCaused, FaultSpan, FaultSpans, NoteSource, RequestRecord
from loadrepro.workload.model import PlannedRequest


class FaultsOnPurpose:
    def __init__(self, events: list[ChaosEvent], clock: Callable[[], int], stopped: asyncio.Event,
                 note: Callable[[NoteSource, str], None],
                 written: Callable[[Fault | FaultNotCaused], None] = lambda kept: None) -> None:
        """`stopped`: set once the load starts no new request (a fault is then not caused); `note`: says a fault
        as it happened; `written`: each fault, and each not caused, as it is kept."""
        self.events, self._clock, self._stopped, self._note = events, clock, stopped, note
        self._written = written
        self.spans = FaultSpans()  # each fault as it happens: what was its doing
        self.faults: list[Fault] = []
        self.not_caused: list[FaultNotCaused] = []
        self.started_ns = 0  # the load's time zero, which the events' times count from
        self._load_over = False
        self._wiped: list[int] = []  # when a fault restarted the engine, its prefix cache empty from then on
        self._turn_ends: dict[int, int] = {}  # each conversation's last turn's end, when a fault will restart
        self._wipes = any(e.action in WIPES for e in events)
        self._tasks: dict[asyncio.Task[None], ChaosEvent] = {}  # each fault going on
        self._handles: list[asyncio.TimerHandle] = []

    def schedule(self, tools: ChaosTools) -> None:
        """Each event at its time from now (the load's time zero)."""
        tools = dataclasses.replace(tools, load_ended=lambda: self._load_over or self._stopped.is_set())
        loop = asyncio.get_running_loop()
        self._handles = [loop.call_later(e.at_s, self._fault, e, tools) for e in self.events]

    def load_ended(self) -> None:
        """No fault is caused after the load: those whose time it never reached are kept, with why."""
        self._load_over = True
        for handle in self._handles:
            handle.cancel()
        ended_s = (self._clock() - self.started_ns) / 1e9
        for event in self.events:
            if event.at_s > ended_s:
                self._not_caused(FaultNotCaused(event.action, event.at_s, f"the load ended at {ended_s:.1f} s"))

    async def done(self, interrupted: bool) -> None:
        """Faults still going on when the load ends: waited for (each ends within its recover_within_s, at once
        when the engine is gone), unless the run was interrupted; a wait of a second or more is said, since it
        lengthens the run."""
        if interrupted:
            self.interrupt()
        going = [f"the {e.action.replace('_', ' ')} at {e.at_s:g} s" for e in self._tasks.values()]
        waited = self._clock()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        waited_s = (self._clock() - waited) / 1e9
        if going and not interrupted and waited_s >= 1.0:
            self._note(NoteSource.CHAOS, f"the run waited {waited_s:.1f} s after the load for {', '.join(going)}, "
                                         "still going on when the load ended")

    def interrupt(self) -> None:
        """The faults going on end now, whatever they wait for (the user stopped the run)."""
        for task in self._tasks:
            task.cancel()

    def after_wipe(self, record: RequestRecord) -> RequestRecord:
        """A later turn whose conversation's previous turn the engine served before a restart expects nothing from
        the prefix cache: the restart emptied it (not the engine failing to reuse a prefix)."""
        if not self._wipes:
            return record
        previous = self._turn_ends.get(record.conversation)
        self._turn_ends[record.conversation] = record.end_ns
        if record.turn > 1 and previous is not None and any(
                previous <= at <= record.sent_or_queued_ns for at in self._wiped):
            return record.expecting_no_cache()
        return record

    def _not_caused(self, kept: FaultNotCaused) -> None:
        self.not_caused.append(kept)
        self._written(kept)

    def _fault(self, event: ChaosEvent, tools: ChaosTools) -> None:
        """A fault, at its time, unless the load has already stopped; it runs beside the load."""
        if self._stopped.is_set():
            return
        task = asyncio.get_running_loop().create_task(self._cause(event, tools))
        self._tasks[task] = event
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    async def _engine_back(self) -> str | None:
        """Waits while an earlier fault has the engine down (until /health 200 again, or its time to be back ran
        out): a fault is caused on the engine, not on its absence. What it waited for, in words."""
        waited = [f"{o.action} at {(o.began_ns - self.started_ns) / 1e9:.1f} s" for o in self.spans.going_on()]
        while self.spans.going_on() and not self._stopped.is_set():
            await asyncio.sleep(BACK_POLL_S)
        return ", ".join(waited) or None

    async def _cause(self, event: ChaosEvent, tools: ChaosTools) -> None:
        if (waited := await self._engine_back()) is not None:
            late = (self._clock() - self.started_ns) / 1e9 - event.at_s
            what = f"the {event.action.replace('_', ' ')} at {event.at_s:g} s"
            if self._stopped.is_set():
                self._not_caused(FaultNotCaused(event.action, event.at_s, f"the engine was still down from the "
                                                                          f"{waited} when the load ended"))
                return
            self._note(NoteSource.CHAOS, f"{what} was caused {late:.1f} s late: the engine was down from the {waited} "
                                         "until then")
        span = FaultSpan(event.action, 0)

        def began(at_ns: int) -> None:
            span.began_ns = at_ns
            self.spans.spans.append(span)
            if event.action in WIPES:
                self._wiped.append(at_ns)

        try:
            fault = await cause(event, tools, began)
        except BaseException:
            span.over_ns = self._clock()  # interrupted: the fault ends here
            raise
        span.over_ns = fault.over_ns
        self.faults.append(fault)
        self._written(fault)
        back = (f"/health 200 {(fault.back_ns - fault.done_ns) / 1e9:.1f} s after" if fault.back_ns else
                f"/health not 200 within {event.recover_within_s:g} s of")
        self._note(NoteSource.CHAOS, f"{event.action.replace('_', ' ')} at {event.at_s:g} s: {fault.detail}; {back} "
                                     f"{'it was started again' if event.action in WIPES else 'that'}")


def lent_tools(target: RunTarget, config: ClientConfig, abort: Callable[[int], Awaitable[tuple[int, int]]],
               health: HealthWatcher | None, clock: Callable[[], int], gone: Callable[[], bool],
               spans: FaultSpans) -> ChaosTools:
    """What the run lends its faults: the engine it started, the load's abort, one request sent outside the load
    (on its own connection, never retried), a /health poll, `gone` (waiting for the engine is pointless) and the
    faults' spans as they happen."""
    async def healthy() -> bool:
        return (await health.poll()).healthy if health else True

    async def send(planned: PlannedRequest) -> RequestRecord:
        alone = dataclasses.replace(config.alone(), concurrency=1, max_retries=0)
        async with Client(alone, clock) as own:  # its own connection, outside the load's limit
            return await own.send(-1, planned, clock(), time.time(), lambda r: None)

    return ChaosTools(target.engine, abort, send, healthy if health else None, config.api, target.oversize, clock,
                      target.base_url, config.api_key, target.model, gone, spans)
