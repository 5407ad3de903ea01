"""An engine's introspection endpoint ([watch] introspection_path: llama.cpp's /slots) polled beside /health, on a
connection of its own, each poll given up after [watch] introspection_timeout_s: a scheduler wedged behind a live
frontend stops answering it while /health still answers 200 (rule introspection_unresponsive)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from loadrepro.config.profile import Profile, WatchSpec
from loadrepro.load.cache_reset import slot_ids
from loadrepro.load.transport import Transport
from loadrepro.load.watch.health_polls import HealthWatcher
from loadrepro.records import EndpointSample, HealthSample

INTROSPECTION = "introspection"  # the name its polls are kept under, beside the watched endpoints'
AUTO = "auto"


async def introspection_for(http: Transport, profile: Profile) -> Profile:
    """The profile with `introspection_path = "auto"` made a path: llama.cpp's /slots where the target answers it
    with its slots (asked once, before the load), else none."""
    if profile.watch.introspection_path != AUTO:
        return profile
    path = "/slots" if await slot_ids(http, profile.watch.introspection_timeout_s) else ""
    return profile.model_copy(update={"watch": profile.watch.model_copy(update={"introspection_path": path})})


async def watch_introspection(base_url: str, api_key: str | None, watch: WatchSpec,
                              on_sample: Callable[[EndpointSample], None], clock: Callable[[], int],
                              stop: asyncio.Event) -> None:
    def sampled(sample: HealthSample) -> None:
        on_sample(EndpointSample(INTROSPECTION, sample))

    async with Transport(base_url, api_key, timeout_s=watch.introspection_timeout_s) as http:
        polls = HealthWatcher(http, watch.introspection_path, watch.health_interval_s, sampled, clock)
        polls.give_up_s = watch.introspection_timeout_s
        await polls.run(stop)
