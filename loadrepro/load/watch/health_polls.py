"""Polls the target's health endpoint on a fixed interval for the whole run, timing every poll.

A slow answer is an answer: a busy engine answers /health late (vllm#24207, ray#54070), and a poll given up too
soon would read a healthy engine as gone. A poll is unreachable only when nothing answers at all: refused, reset,
or no answer within HEALTH_GIVE_UP x health_timeout_s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from loadrepro.config.profile import HEALTH_GIVE_UP
from loadrepro.load.transport import NoAnswer, Transport
from loadrepro.records import HealthSample

POKE_MIN_GAP_NS = 100_000_000  # extra polls at most every 100 ms


class HealthWatcher:
    def __init__(self, http: Transport, path: str, interval_s: float,
                 on_sample: Callable[[HealthSample], None], clock: Callable[[], int] = time.perf_counter_ns,
                 timeout_s: float = 5.0) -> None:
        """`timeout_s`: [watch] health_timeout_s, beyond which an answer is slow."""
        self._http, self._path, self._interval_s = http, path, interval_s
        self._on_sample, self._clock = on_sample, clock
        self.give_up_s = HEALTH_GIVE_UP * timeout_s
        self._poke = asyncio.Event()
        self._last_ns = 0

    def poke(self) -> None:
        """Poll now rather than at the next interval (a request just failed: when did /health change?)."""
        if self._clock() - self._last_ns > POKE_MIN_GAP_NS:
            self._poke.set()

    async def poll(self) -> HealthSample:
        started = self._last_ns = self._clock()
        response = await self._http.get(self._path, self.give_up_s)
        status: int | str = "unreachable" if isinstance(response, NoAnswer) else response.status
        answered = self._clock()
        # Stamped when the answer came: that is when the status was known, however long it took to come.
        sample = HealthSample(answered, status, answered - started)
        self._on_sample(sample)
        return sample

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until `stop` is set; the first poll happens at once."""
        while not stop.is_set():
            self._poke.clear()
            await self.poll()
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._poke.wait())]
            try:
                await asyncio.wait(waits, timeout=self._interval_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waits:
                    waiter.cancel()
