"""Another process of the deployment watched beside the target ([[watch.endpoints]]): its /health polled and its
metrics scraped as the target's are (the same watchers), each sample named by the endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import urlsplit

from loadrepro.config.profile import WatchedEndpoint, WatchSpec
from loadrepro.load.transport import Transport
from loadrepro.load.watch.health_polls import HealthWatcher
from loadrepro.load.watch.metrics_scrapes import MetricsWatcher
from loadrepro.records import EndpointSample, HealthSample, MetricsSample, Note, replica_name


def _split(url: str) -> tuple[str, str]:
    """(scheme://host:port, /path?query)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}", (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def replicas_watched(urls: tuple[str, ...], watch: WatchSpec) -> tuple[WatchedEndpoint, ...]:
    """The replicas beside the target ([target] replicas), watched at the target's paths: replica-1, replica-2..."""
    def at(url: str, path: str) -> str:
        return url.rstrip("/") + path if path else ""
    return tuple(WatchedEndpoint(name=replica_name(i), health_url=at(url, watch.health_path),
                                 metrics_url=at(url, watch.metrics_path)) for i, url in enumerate(urls, 1))


async def watch_endpoint(endpoint: WatchedEndpoint, watch: WatchSpec, on_sample: Callable[[EndpointSample], None],
                         clock: Callable[[], int], stop: asyncio.Event) -> None:
    """Polls the endpoint's /health and scrapes its metrics until `stop` (each on a connection of its own, so that
    a dead endpoint's give-ups do not hold the other's)."""
    def sampled(sample: HealthSample | MetricsSample | Note) -> None:
        if isinstance(sample, HealthSample | MetricsSample):  # a note (metrics unusable) is the target's to say
            on_sample(EndpointSample(endpoint.name, sample))

    async with asyncio.TaskGroup() as tg:
        if endpoint.health_url:
            base, path = _split(endpoint.health_url)
            tg.create_task(_health(base, path, watch, sampled, clock, stop))
        if endpoint.metrics_url:
            base, path = _split(endpoint.metrics_url)
            tg.create_task(_metrics(base, path, watch, sampled, clock, stop))


async def _health(base: str, path: str, watch: WatchSpec, sampled: Callable[[HealthSample], None],
                  clock: Callable[[], int], stop: asyncio.Event) -> None:
    async with Transport(base, None, timeout_s=5.0) as http:
        await HealthWatcher(http, path, watch.health_interval_s, sampled, clock, watch.health_timeout_s).run(stop)


async def _metrics(base: str, path: str, watch: WatchSpec, sampled: Callable[[MetricsSample | Note], None],
                   clock: Callable[[], int], stop: asyncio.Event) -> None:
    async with Transport(base, None, timeout_s=5.0) as http:
        await MetricsWatcher(http, path, watch.metrics_interval_s, sampled, clock).run(stop)
