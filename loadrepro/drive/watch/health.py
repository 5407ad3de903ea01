"""Polls the target's health endpoint on a fixed interval for the whole run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from loadrepro.records import HealthSample

POKE_MIN_GAP_NS = 100_000_000  # extra polls at most every 100 ms


class HealthWatcher:
    def __init__(self, http: httpx.AsyncClient, path: str, interval_s: float,
                 on_sample: Callable[[HealthSample], None], clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._http, self._path, self._interval_s = http, path, interval_s
        self._on_sample, self._clock = on_sample, clock
        self._timeout_s = max(0.5, min(2.0, interval_s))
        self._poke = asyncio.Event()
        self._last_ns = 0

    def poke(self) -> None:
        """Poll now rather than at the next interval (a request just failed: when did /health change?)."""
        if self._clock() - self._last_ns > POKE_MIN_GAP_NS:
            self._poke.set()

    async def poll(self, timeout_s: float | None = None) -> HealthSample:
        started = self._last_ns = self._clock()
        try:
            response = await self._http.get(self._path, timeout=timeout_s or self._timeout_s)
            status: int | str = response.status_code
        except httpx.HTTPError:
            status = "unreachable"
        sample = HealthSample(started, status, self._clock() - started)
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
