"""Scale-out beyond one machine (`--ray [ADDRESS]`, `pip install 'loadrepro[ray]'`): the same split as
drive/workers.py, each share run by a Ray actor (spread over the cluster's nodes) with its own client on its own
event loop, its records pulled by the driver in batches, which stays the one writer of requests.jsonl and the only
one watching the engine.

- Without an address, a local Ray instance is started for the run and stopped after it; with one, the driver
  joins that cluster (loadrepro must be installed on its nodes) and leaves it running.
- Each pull carries the driver's stop level and the engine's last progress to the actor and brings back its
  records, its requests in flight and its own last progress: what crosses at once on one machine crosses here
  within a pull (50 ms plus a round trip).
- One time axis: an actor on the driver's node shares its monotonic clock (no offset). On another node the
  driver asks the actor's clock between two readings of its own and takes the midpoint: each of that actor's
  times is shifted by the difference, with a residual error of at most half that round trip, stated in the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from loadrepro.drive.arrivals import Arrivals
from loadrepro.drive.client import Activity, Client, ClientConfig
from loadrepro.drive.live import LiveState
from loadrepro.drive.workers import CANCEL, GO, NO_NEW, POLL_S, Share, split
from loadrepro.errors import InternalError, UsageError
from loadrepro.profile import LoadSpec
from loadrepro.records import RequestRecord
from loadrepro.workload.model import Workload

_DRAIN_S = 15.0
_CLOCK_READINGS = 5  # the offset is taken from the reading with the shortest round trip


class RayWorker:
    """A Ray actor's body (made remote in RayArrivals): one share of the load, its records kept for the next
    pull."""

    def __init__(self, share: Share, config: ClientConfig, seed: int) -> None:
        self._share, self._config, self._seed = share, config, seed
        self._records: list[RequestRecord] = []
        self._arrived = asyncio.Event()
        self._stopped = asyncio.Event()
        self._activity = Activity()
        self._live: LiveState | None = None
        self._task: asyncio.Task[None] | None = None

    def node(self) -> tuple[str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), time.perf_counter_ns()

    async def start(self, started_ns: int) -> None:
        self._live = LiveState(started_ns, None, None)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async with Client(self._config, activity=self._activity) as client:
            share = self._share
            await Arrivals(share.load, share.workload, self._seed, client, self._live, self._stopped, self._keep,
                           stream=share.index, streams=share.count).run()

    def _keep(self, record: RequestRecord) -> None:
        self._records.append(record)
        self._arrived.set()

    async def pull(self, level: int, activity_ns: int) -> dict[str, Any]:
        """Apply the driver's stop level and progress; the records since the last pull (waiting up to POLL_S for
        one), whether the share is done, and its error if it failed."""
        assert self._task is not None and self._live is not None
        self._activity.last_ns = max(self._activity.last_ns, activity_ns)
        if level >= NO_NEW:
            self._stopped.set()
        if level >= CANCEL:
            self._task.cancel()
        if not self._records and not self._task.done():
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), POLL_S)
            except TimeoutError:
                pass
        records, self._records = self._records, []
        done = self._task.done()  # its last records are in this batch: nothing is added once it is done
        error = None
        if done and not self._task.cancelled() and self._task.exception() is not None:
            error = f"{type(self._task.exception()).__name__}: {self._task.exception()}"
        return {"records": records, "in_flight": self._live.in_flight, "activity_ns": self._activity.last_ns,
                "done": done, "error": error}


def _shifted(record: RequestRecord, offset_ns: int) -> RequestRecord:
    """A record on the driver's clock: `offset_ns` is the actor's clock minus the driver's."""
    if not offset_ns:
        return record

    def at(ns: int | None) -> int | None:
        return None if ns is None else ns - offset_ns

    return dataclasses.replace(record, queued_ns=record.queued_ns - offset_ns, sent_ns=at(record.sent_ns),
                               first_byte_ns=at(record.first_byte_ns), first_token_ns=at(record.first_token_ns),
                               first_content_ns=at(record.first_content_ns),
                               end_ns=record.end_ns - offset_ns, chunk_ns=tuple(t - offset_ns for t in record.chunk_ns))


@contextlib.contextmanager
def _held_stderr() -> Iterator[None]:
    """File descriptor 2 into a temporary file for the block; what it held is written out if the block raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            held.seek(0)
            sys.stderr.write(held.read().decode("utf-8", "replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class RayArrivals:
    """Arrivals spread over Ray actors, with the interface of drive.arrivals.Arrivals (see WorkerArrivals)."""

    def __init__(self, load: LoadSpec, workload: Workload, seed: int, client: Client, live: LiveState,
                 stopped: asyncio.Event, on_record: Callable[[RequestRecord], None], count: int,
                 address: str | None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise UsageError("--ray needs Ray: pip install 'loadrepro[ray]'") from exc
        self._ray = ray
        self._shares = split(load, workload, count)
        self._config, self._seed, self._live, self._stopped = client.config, seed, live, stopped
        self._on_record, self._client = on_record, client
        self._address = address
        self._level = GO
        self.residual_ns = 0  # the largest clock-offset uncertainty of any actor (half its round trip)
        self.nodes: set[str] = set()
        self._actors: list[Any] = []
        self._offsets: list[int] = []
        self._started_here = False

    def _connect(self) -> bool:
        """Joins the cluster, or starts a local instance; True when this run started it."""
        if self._ray.is_initialized():
            return False
        # Ray's own start-up words (its SIGTERM handler, which it cannot set off the main thread; its token
        # authentication, written by its C++ core straight to file descriptor 2) are noise in a CI log: they are
        # shown only when joining or starting Ray fails.
        logging.getLogger("ray").setLevel(logging.ERROR)
        with _held_stderr():
            self._ray.init(address=self._address or None, include_dashboard=False, log_to_driver=False,
                           configure_logging=False)
        return self._address is None

    async def prepare(self) -> None:
        """Joins or starts Ray (on a thread: Ray would take over SIGTERM from the main thread) and starts the
        actors, before the load's time zero: a local instance takes seconds to start."""
        self._started_here = await asyncio.to_thread(self._connect)
        actor = self._ray.remote(num_cpus=0, scheduling_strategy="SPREAD")(RayWorker)
        self._actors = [actor.remote(share, self._config, self._seed) for share in self._shares]
        self._offsets = [await self._offset(a) for a in self._actors]

    async def run(self) -> None:
        if not self._actors:
            await self.prepare()
        actors, offsets = self._actors, self._offsets
        try:
            await asyncio.gather(*(a.start.remote(self._live.started_ns + off) for a, off in zip(actors, offsets)))
            try:
                await self._pump(actors, offsets)
            except asyncio.CancelledError:
                self._level = CANCEL
                await asyncio.shield(asyncio.wait_for(self._pump(actors, offsets), _DRAIN_S))
                raise
        finally:
            for a in actors:
                self._ray.kill(a)
            if self._started_here:
                await asyncio.to_thread(self._ray.shutdown)

    async def _offset(self, actor: Any) -> int:
        """The actor's clock minus the driver's: none on the driver's node, else the midpoint reading."""
        here = self._ray.get_runtime_context().get_node_id()
        best: tuple[int, int] | None = None
        for _ in range(_CLOCK_READINGS):
            before = time.perf_counter_ns()
            node, theirs = await actor.node.remote()
            after = time.perf_counter_ns()
            if best is None or after - before < best[0]:
                best = (after - before, theirs - (before + after) // 2)
        self.nodes.add(node)
        if node == here:
            return 0
        self.residual_ns = max(self.residual_ns, best[0] // 2)
        return best[1]

    async def _pump(self, actors: list[Any], offsets: list[int]) -> None:
        """Pull from every actor until all are done; each pull passes the stop level and the progress on."""
        running = dict(enumerate(actors))
        in_flight = [0] * len(actors)
        while running:
            if self._stopped.is_set() and self._level < NO_NEW:
                self._level = NO_NEW
            progress = self._client.activity.last_ns
            pulled = await asyncio.gather(*(a.pull.remote(self._level, progress + offsets[i])
                                            for i, a in running.items()))
            for (i, _), batch in zip(list(running.items()), pulled):
                for record in batch["records"]:
                    self._on_record(_shifted(record, offsets[i]))
                in_flight[i] = batch["in_flight"]
                self._client.activity.last_ns = max(self._client.activity.last_ns,
                                                    batch["activity_ns"] - offsets[i])
                if batch["error"]:
                    raise InternalError(f"a Ray load worker failed, so part of the load is missing: "
                                        f"{batch['error']}")
                if batch["done"]:
                    del running[i]
            self._live.in_flight = sum(in_flight[i] for i in running)
        self._live.in_flight = 0
