"""Polls the target's health endpoint on a fixed interval for the whole run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from loadrepro.records import HealthSample


class HealthWatcher:
    def __init__(self, http: httpx.AsyncClient, path: str, interval_s: float,
                 on_sample: Callable[[HealthSample], None], clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._http, self._path, self._interval_s = http, path, interval_s
        self._on_sample, self._clock = on_sample, clock
        self._timeout_s = max(0.5, min(2.0, interval_s))

    async def poll(self, timeout_s: float | None = None) -> HealthSample:
        started = self._clock()
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
            await self.poll()
            try:
                await asyncio.wait_for(stop.wait(), self._interval_s)
            except TimeoutError:
                pass
