"""Scale-out beyond one machine (`--ray [ADDRESS]`, `pip install 'loadrepro[ray]'`): the same split as
processes.py, each share run by a Ray actor (spread over the cluster's nodes) with its own client on its own
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
- max_rps cannot be one schedule across machines: each actor starts at most max_rps / N requests a second,
  spaced, so one second may hold up to N - 1 starts more than max_rps; the report says so.
- The actors begin their shares at one instant, a moment after the driver tells them to start: told one after
  another, on a busy machine one heard it a fifth of a second after the other, and a load whose failure needs its
  requests together (a pool that fills only when they overlap) then passed on Ray and failed in one process.
- An actor that dies or whose share raises cancels the others; run() then raises WorkerCrashed, and the runner
  keeps every record received.
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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from loadrepro.config.profile import BackendName
from loadrepro.errors import UsageError
from loadrepro.load.arrivals import Arrivals
from loadrepro.load.backend.base import CRASHED, DRAIN_S, LoadSetup, WorkerCrashed
from loadrepro.load.backend.processes import CANCEL, GO, NO_NEW, POLL_S, Share, split
from loadrepro.load.client import Activity, Client, ClientConfig
from loadrepro.load.live import LiveState
from loadrepro.records import RequestRecord

ACTOR_CPUS = 0.01
START_LEAD_S = 0.5  # from telling the ready actors to go to their common start: the call's delay, and a margin
_CLOCK_READINGS = 5  # the offset is taken from the reading with the shortest round trip


@dataclass(frozen=True, slots=True)
class Batch:
    """What one pull brings back from an actor."""

    records: list[RequestRecord]  # since the last pull, on the actor's clock
    in_flight: int
    queued: int  # due and waiting in the actor for a concurrency slot
    at_target: int  # of those in flight, the ones sent to the target (LiveState.at_target)
    activity_ns: int  # the engine's last progress the actor saw, on its clock
    done: bool  # its share is over: no record comes after this batch
    error: str | None  # what its share raised, if it did


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

    def clock(self) -> int:
        """This actor's clock, which every time it records is on (its machine's monotonic clock)."""
        return time.perf_counter_ns()

    def node(self) -> tuple[str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), self.clock()

    async def start(self, started_ns: int) -> None:
        """Make the share ready, its client open, the load's time zero being `started_ns`; returns once it is (or
        failed: `pull` says why), and the share begins when `go` says."""
        self._live = LiveState(started_ns, None, None)
        self._go: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        opened = asyncio.Event()
        self._task = asyncio.create_task(self._run(opened))
        waiting = asyncio.ensure_future(opened.wait())
        await asyncio.wait({waiting, self._task}, return_when=asyncio.FIRST_COMPLETED)  # or it failed first
        waiting.cancel()

    async def go(self, at_ns: int) -> None:
        """Begin the share at `at_ns` (this actor's clock)."""
        self._go.set_result(at_ns)

    async def _run(self, opened: asyncio.Event) -> None:
        assert self._live is not None, "started by start()"
        async with Client(self._config, self.clock, activity=self._activity) as client:
            opened.set()
            at_ns = await self._go
            await asyncio.sleep(max(0.0, (at_ns - self.clock()) / 1e9))
            share = self._share
            await Arrivals(share.load, share.workload, self._seed, client, self._live, self._stopped, self._keep,
                           self.clock, stream=share.index, streams=share.count).run()

    def _keep(self, record: RequestRecord) -> None:
        self._records.append(record)
        self._arrived.set()

    async def pull(self, level: int, activity_ns: int) -> Batch:
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
        return Batch(records, self._live.in_flight, self._live.queued, self._live.at_target, self._activity.last_ns,
                     done, error)


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
    """The load sent from Ray actors (load/backend/base.py's LoadBackend)."""

    name: BackendName = "ray"

    def __init__(self, setup: LoadSetup, count: int, address: str | None,
                 worker: type[RayWorker] = RayWorker) -> None:
        """`worker`: the actors' class (a test gives one with its own clock)."""
        try:
            import ray
        except ImportError as exc:
            raise UsageError("--ray needs Ray: pip install 'loadrepro[ray]'") from exc
        self._ray = ray
        self.workers = count
        load = setup.load
        shares = split(load, setup.workload, count)
        if load.max_rps:  # no schedule can be shared across machines: each actor keeps its part
            shares = [dataclasses.replace(s, load=s.load.model_copy(update={"max_rps": load.max_rps / count}))
                      for s in shares]
        self._shares, self._setup = shares, setup
        self._config, self._seed, self._live, self._stopped = setup.client.config, setup.seed, setup.live, setup.stopped
        self._on_record, self._client = setup.on_record, setup.client
        self._address, self._worker = address, worker
        self._level = GO
        self.residual_ns = 0  # the largest clock-offset uncertainty of any actor (half its round trip)
        self.nodes: set[str] = set()
        self._actors: list[Any] = []
        self._offsets: list[int] = []
        self._started_here = False

    @property
    def offsets(self) -> list[int]:
        """Each actor's clock minus the driver's, as measured (0: on the driver's node)."""
        return list(self._offsets)

    async def abort(self, count: int) -> tuple[int, int]:
        """Requests in flight are in other processes: abort bursts are refused with workers (api.run_options)."""
        return 0, 0

    def notes(self) -> list[str]:
        clocks = (f"clock offsets measured, residual error at most {self.residual_ns / 1e6:.2f} ms"
                  if self.residual_ns else "every actor on this machine's clock, no offset")
        said = [f"{self.workers} Ray actors on {len(self.nodes)} node(s); {clocks}"]
        if self._setup.load.max_rps:
            rps = self._setup.load.max_rps
            said.append(f"max_rps: each of the {self.workers} Ray actors started at most {rps / self.workers:g} "
                        f"requests a second, spaced, so one second may have held up to {self.workers - 1} starts "
                        f"more than {rps:g} (actors on other machines share no schedule)")
        return said

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
        # SPREAD places actors that ask for no resources all on one node: each asks for a hundredth of a CPU, so
        # they are spread over the nodes that have CPUs (a head started with no CPUs keeps none).
        actor = self._ray.remote(num_cpus=ACTOR_CPUS, scheduling_strategy="SPREAD")(self._worker)
        self._actors = [actor.remote(share, self._config, self._seed) for share in self._shares]
        self._offsets = [await self._offset(a) for a in self._actors]

    async def run(self) -> None:
        if not self._actors:
            await self.prepare()
        actors, offsets = self._actors, self._offsets
        try:
            # Every actor ready first (a busy machine may take a while to open a client), then one instant for all:
            # an actor that began late would send its share beside fewer of the others' requests.
            await asyncio.gather(*(a.start.remote(self._live.started_ns + off) for a, off in zip(actors, offsets)))
            at = time.perf_counter_ns() + int(START_LEAD_S * 1e9)
            await asyncio.gather(*(a.go.remote(at + off) for a, off in zip(actors, offsets)))
            try:
                await self._pump(actors, offsets)
            except asyncio.CancelledError:
                self._level = CANCEL
                await asyncio.shield(asyncio.wait_for(self._pump(actors, offsets), DRAIN_S))
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
        assert best is not None, "measured at least once"
        self.residual_ns = max(self.residual_ns, best[0] // 2)
        return best[1]

    async def _pump(self, actors: list[Any], offsets: list[int]) -> None:
        """Pull from every actor until all are done; each pull passes the stop level and the progress on. An actor
        that died or failed cancels the others, whose last records are still pulled."""
        running = dict(enumerate(actors))
        in_flight, queued, at_target = [0] * len(actors), [0] * len(actors), [0] * len(actors)
        crashed: list[str] = []
        while running:
            if self._stopped.is_set() and self._level < NO_NEW:
                self._level = NO_NEW
            progress = self._client.activity.last_ns
            pulled = await asyncio.gather(*(a.pull.remote(self._level, progress + offsets[i])
                                            for i, a in running.items()), return_exceptions=True)
            for (i, _), batch in zip(list(running.items()), pulled, strict=True):
                if isinstance(batch, BaseException):
                    if isinstance(batch, asyncio.CancelledError):
                        raise batch
                    crashed.append(f"Ray actor {i} is gone ({type(batch).__name__}: {batch})")
                    del running[i]
                    continue
                for record in batch.records:
                    self._on_record(_shifted(record, offsets[i]))
                in_flight[i], queued[i], at_target[i] = batch.in_flight, batch.queued, batch.at_target
                self._client.activity.last_ns = max(self._client.activity.last_ns, batch.activity_ns - offsets[i])
                if batch.error:
                    crashed.append(f"Ray actor {i} raised {batch.error}")
                if batch.done:
                    del running[i]
            if crashed:
                self._level = CANCEL
            self._live.in_flight = sum(in_flight[i] for i in running)
            self._live.queued = sum(queued[i] for i in running)
            self._live.at_target = sum(at_target[i] for i in running)
        self._live.in_flight = self._live.queued = self._live.at_target = 0
        if crashed:
            raise WorkerCrashed(CRASHED + "; ".join(crashed))
