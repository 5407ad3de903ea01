"""What the run asks the engine once the load has ended: its metrics until nothing runs (what still runs then, with
nothing of loadrepro's in flight, the engine never freed: zombie_requests), and its /health's last word."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from loadrepro.load.pause import pause, unless
from loadrepro.load.watch.health_polls import HealthWatcher
from loadrepro.load.watch.metrics_scrapes import MetricsWatcher
from loadrepro.records import RUNNING, WAITING, HealthSample

SETTLE_S, SETTLE_POLL_S = 5.0, 0.5  # after the load, how long the engine may take to show nothing running


async def settle_metrics(metrics: MetricsWatcher, last: Callable[[], dict[str, float]], settle_s: float,
                         interrupted: asyncio.Event, clock: Callable[[], int]) -> None:
    """Scrapes until the engine reports nothing running or waiting (`last`: the latest scrape's values), for up to
    `settle_s`; a scrape the engine does not answer at once is cut short by `interrupted`."""
    deadline = clock() + int(settle_s * 1e9)
    while True:
        await unless(interrupted, metrics.scrape())
        values = last()
        if not values.get(RUNNING) and not values.get(WAITING) or clock() >= deadline or interrupted.is_set():
            return
        await asyncio.sleep(SETTLE_POLL_S)


async def last_health(health: HealthWatcher, interrupted: asyncio.Event, interval_s: float,
                      exited: Callable[[], bool]) -> HealthSample | None:
    """A poll, and one that got no answer asked once more `interval_s` later (one hung poll of a busy engine is not
    its death), unless the engine's process `exited` meanwhile. None when an interrupted run got no answer at once:
    an interrupted run is not judged by it."""
    post = await unless(interrupted, health.poll())
    if post is None or post.status != "unreachable" or exited():
        return post
    if await pause(interrupted, interval_s):
        return post
    return await unless(interrupted, health.poll()) or post
