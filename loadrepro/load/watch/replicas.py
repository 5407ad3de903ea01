"""The replicas beside the target ([target] replicas): their /health and metrics watched as endpoints are, the logs
of those loadrepro started followed and their exits seen. While one still serves, the target's death does not end
the load (rule replica_death says what they did)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any

from loadrepro.config.profile import WatchedEndpoint, WatchSpec
from loadrepro.judge.signatures import Signature
from loadrepro.load.engine import describe_exit
from loadrepro.load.pause import pause
from loadrepro.load.run_target import StartedReplica
from loadrepro.load.watch.endpoint_polls import replicas_watched, watch_endpoint
from loadrepro.load.watch.logs import LogWatcher
from loadrepro.records import (
    EndpointSample,
    HealthSample,
    MetricsSample,
    NoteSource,
    ProcessExit,
    ReplicaExit,
    Sample,
    Watched,
)

EXIT_POLL_S = 0.1  # how often a started replica's process is looked at

Polled = dict[str, tuple[list[HealthSample], list[MetricsSample]]]  # each watched endpoint's samples, by its name


class Replicas:
    def __init__(self, urls: tuple[str, ...], started: tuple[StartedReplica, ...], watch: WatchSpec,
                 signatures: tuple[Signature, ...], on_sample: Callable[[Sample], None], clock: Callable[[], int],
                 polled: Polled, written: Callable[[ReplicaExit], None] = lambda exit: None) -> None:
        """`polled`: the recorder's samples of every watched endpoint, which say whether a replica still serves;
        `written`: each replica's exit, as it is seen."""
        self.urls, self.started, self._watch, self._clock, self._polled = urls, started, watch, clock, polled
        self._written = written
        self.endpoints = replicas_watched(urls, watch)
        self.logs = [LogWatcher(r.log, on_sample, True, signatures, clock, r.index) for r in started]
        self.exits: dict[int, ProcessExit] = {}

    def serve(self) -> bool:
        """Whether a replica answered its last /health poll 200 (one not polled yet counts as serving)."""
        def serves(index: int, name: str) -> bool:
            health = self._polled.get(name, ([], []))[0]
            return index not in self.exits and (not health or health[-1].healthy)
        return any(serves(i, r.name) for i, r in enumerate(self.endpoints, 1))

    def _exited(self) -> bool:
        """Note when each started replica exits by itself (once); True when one did now."""
        now = False
        for replica in self.started:
            if replica.index not in self.exits and (code := replica.exit_code()) is not None:
                self.exits[replica.index] = ProcessExit(self._clock(), code, describe_exit(code))
                self._written(ReplicaExit(replica.index, self.exits[replica.index]))
                now = True
        return now

    async def _watch_exits(self, stop: asyncio.Event, on_exit: Callable[[], None]) -> None:
        while not stop.is_set() and len(self.exits) < len(self.started):
            if self._exited():
                on_exit()
            await pause(stop, EXIT_POLL_S)

    def watchers(self, on_sample: Callable[[EndpointSample], None], on_exit: Callable[[], None],
                 stop: asyncio.Event) -> list[tuple[NoteSource, Coroutine[Any, Any, Any]]]:
        """Each watcher beside the load, named by what it says when it fails; `on_exit` when a replica exits."""
        table: list[tuple[NoteSource, Coroutine[Any, Any, Any]]] = [
            (NoteSource.HEALTH, watch_endpoint(e, self._watch, on_sample, self._clock, stop)) for e in self.endpoints]
        table += [(NoteSource.ENGINE_LOG, log.run(stop)) for log in self.logs]
        if self.started:
            table.append((NoteSource.ENGINE, self._watch_exits(stop, on_exit)))
        return table

    def watched(self, watched: Callable[[WatchedEndpoint], Watched]) -> tuple[Watched, ...]:
        """Each replica as the result holds it: what `watched` made of its polls, its URL and its exit."""
        return tuple(dataclasses.replace(watched(e), url=url, exit=self.exits.get(i))
                     for i, (e, url) in enumerate(zip(self.endpoints, self.urls, strict=True), 1))
