"""Runs the pure scheduler in real time and hands each request's events to the HTTP stream waiting for them.

The runtime owns the step loop (one `Scheduler.step()` due every `step_s`, asleep while idle), a queue per live
request, and the engine's log. When the scheduler reports its scripted death, every live request gets the fatal
message, the log gets the lines an engine prints, and from then on every submission is refused with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from loadrepro.sim.config import SimConfig
from loadrepro.sim.replies import Choice
from loadrepro.sim.scheduler import Scheduler
from loadrepro.sim.steps import Finished, Rejection, SchedulerStats, ScriptedDeath


@dataclass(frozen=True, slots=True)
class Token:
    index: int
    choice: Choice


@dataclass(frozen=True, slots=True)
class Fatal:
    message: str


Event = Token | Finished | Fatal


@dataclass(slots=True)
class RequestHandle:
    id: int
    prompt_tokens: int
    queue: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    emitted: int = 0

    async def events(self) -> AsyncIterator[Event]:
        """Tokens in order, then exactly one Finished or Fatal."""
        while True:
            event = await self.queue.get()
            yield event
            if not isinstance(event, Token):
                return


CATCH_UP_STEPS = 2  # how far behind its schedule the step loop still catches up (a moment of a busy machine)


class SimRuntime:
    def __init__(self, config: SimConfig, log: logging.Logger,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        if config.race_probability and config.race_seed is None:  # each start draws anew: the race's timing
            config = dataclasses.replace(config, race_seed=time.time_ns())
        self.config = config
        self.log = log
        self._scheduler = Scheduler(config)
        self._clock, self._sleep = clock, sleep
        self._handles: dict[int, RequestHandle] = {}
        self._wake = asyncio.Event()
        self._crash: str | None = None

    @property
    def fatal(self) -> str | None:
        death = self._scheduler.death
        return death.message if death else self._crash

    @property
    def table_width(self) -> int | None:
        return self._scheduler.table_width

    def stats(self) -> SchedulerStats:
        return self._scheduler.stats()

    def submit(self, tokens: list[str], max_tokens: int, ignore_eos: bool) -> RequestHandle | Rejection | Fatal:
        if self.fatal is not None:
            return Fatal(self.fatal)
        accepted = self._scheduler.submit(tokens, max_tokens, ignore_eos)
        if isinstance(accepted, Rejection):
            self.log.warning("Rejected a request at admission: %s", accepted.message)
            return accepted
        handle = RequestHandle(accepted, len(tokens))
        self._handles[accepted] = handle
        self._wake.set()
        return handle

    def reset_prefix_cache(self) -> None:
        self._scheduler.primary.reset()

    def abort(self, request_id: int) -> None:
        """Forget a request whose client left; a no-op once it has finished."""
        if self._handles.pop(request_id, None) is not None and self.fatal is None:
            self._scheduler.abort(request_id)

    async def run(self) -> None:
        """The engine loop; runs until cancelled. Steps are due every `step_s` from the first after an idle spell,
        so a step the machine ran late (a busy CPU wakes a sleep late) is made up by the next ones: the simulated
        engine's speed is its `step_s`, not the load on the machine it shares with the client measuring it. One
        more than CATCH_UP_STEPS behind, the schedule starts again from now instead of a burst of steps."""
        due: float | None = None
        while True:
            if self._scheduler.idle or self.fatal is not None:
                self._wake.clear()
                await self._wake.wait()
                due = None
            started = self._clock()
            if due is None or started - due > CATCH_UP_STEPS * self.config.step_s:
                due = started
            try:
                out = self._scheduler.step()
            except Exception as exc:  # a defect of the simulator must not leave clients waiting forever
                self.log.exception("Simulator step failed")
                self._crash = f"simulated engine internal error: {exc!r}"
                self._broadcast_death(ScriptedDeath(self._crash, 0, len(self._handles)))
                continue
            for request_id, choice in out.tokens:
                self._emit_token(request_id, choice)
            for finished in out.finished:
                handle = self._handles.pop(finished.request_id, None)
                if handle is not None:
                    handle.queue.put_nowait(finished)
            for request_id in out.preempted:
                self.log.warning("Sequence group %d is preempted by PreemptionMode.RECOMPUTE mode because there is "
                                 "not enough KV cache space.", request_id)
            if out.death is not None:
                self._broadcast_death(out.death)
            due += self.config.step_s
            await self._sleep(max(0.0, due - self._clock()))

    def _emit_token(self, request_id: int, choice: Choice) -> None:
        handle = self._handles.get(request_id)
        if handle is not None:
            handle.queue.put_nowait(Token(handle.emitted, choice))
            handle.emitted += 1

    def _broadcast_death(self, death: ScriptedDeath) -> None:
        self.log.error("[RANK 0] %s", death.message)
        self.log.error("[RANK 0] Executor loop crashed on this rank; hard-killing all 1 ranks")
        self.log.error("[RANK 0] Broadcasting event-loop error to %d pending request(s)", len(self._handles))
        for handle in self._handles.values():
            handle.queue.put_nowait(Fatal(death.message))
        self._handles.clear()
        self.log.error("The engine is dead: /health answers 503 from now on")
