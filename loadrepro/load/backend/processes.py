"""Scale-out on one machine (`--workers N`): the workload's conversations split over N processes, each running
load/arrivals.py and its own client on its own event loop, every record streamed back to the driver, which
stays the one writer of requests.jsonl and the only one watching the engine (health, metrics, log).

- Conversation i goes to worker i mod N, so the same seed always gives the same split; concurrency is split so
  the shares add up to [load] concurrency, and the load's shape is divided (load/shapes.py): rates by N, and each
  worker starts its conversations' places in the run's bursts, so that the bursts keep their size and times;
  max_rps holds for the workers together (SharedStarts: one schedule of starts, so no one-second window holds more
  than max_rps starts).
- One time axis: records are stamped with time.perf_counter_ns, CLOCK_MONOTONIC on Linux, one clock for every
  process of the machine, so the workers' times need no offset (residual error: none beyond the clock's own).
- Shared memory carries what must cross at once: the stop level (0 go on, 1 start no new request, 2 cancel what
  is in flight), the engine's last progress (so a request waiting for its first token in one worker is not
  stalled while another worker's streams, or the driver's metrics, move), and each worker's requests in flight.
  Workers look at it every 50 ms, so a stop reaches them well within a second; they ignore SIGINT and SIGTERM
  (a terminal's Ctrl-C reaches the whole process group) and stop when the driver does, or when it is gone.
- Processes are spawned, not forked: the driver has threads (the record writers) by then.
- A worker that dies (killed, or its share raised) cancels the others; run() then raises WorkerCrashed, and the
  runner keeps every record received.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from ctypes import c_int, c_int64
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Lock
from typing import Any

from loadrepro.config.profile import BackendName, LoadSpec
from loadrepro.errors import UsageError
from loadrepro.load.arrivals import Arrivals
from loadrepro.load.backend.base import CRASHED, DRAIN_S, LoadSetup, WorkerCrashed
from loadrepro.load.client import Client, ClientConfig
from loadrepro.load.live import LiveState
from loadrepro.load.shapes import worker_share
from loadrepro.workload.model import Conversation, Workload

POLL_S = 0.05
GO, NO_NEW, CANCEL = 0, 1, 2


# What a worker sends the driver, in this order: Ready, then its records, then Finished.
@dataclass(frozen=True, slots=True)
class Ready:
    """The worker has imported loadrepro and waits for the load's time zero."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The worker's last word: its share is done or was stopped (error None), or it raised (error says what)."""

    error: str | None = None



@dataclass(frozen=True, slots=True)
class Share:
    """One worker's part of the run."""

    index: int
    count: int  # workers in all
    load: LoadSpec
    workload: Workload


def _trees(conversations: tuple[Conversation, ...]) -> list[list[Conversation]]:
    """The conversations by tree, in order of their roots: an agent and its subagents go to one worker, since its
    turns wait for theirs; any other conversation is a tree of its own."""
    trees: dict[int, list[Conversation]] = {}
    for conversation in conversations:
        trees.setdefault(conversation.root, []).append(conversation)
    return list(trees.values())


def _of_worker(trees: list[list[Conversation]] | tuple[Conversation, ...], k: int,
               count: int) -> tuple[Conversation, ...]:
    """Worker k's conversations: every count-th tree (or conversation, when none is a subagent's) from the k-th."""
    if isinstance(trees, tuple):
        return trees[k::count]
    return tuple(c for tree in trees[k::count] for c in tree)


def split(load: LoadSpec, workload: Workload, count: int) -> list[Share]:
    if count < 1:
        raise UsageError(f"--workers {count}: at least 1")
    if load.concurrency < count:
        raise UsageError(f"--workers {count}: more workers than [load] concurrency ({load.concurrency}) leaves a "
                         f"worker without a request slot")
    trees: list[list[Conversation]] | tuple[Conversation, ...] = workload.conversations
    if any(c.tree is not None for c in workload.conversations):
        trees = _trees(workload.conversations)
    if len(trees) < count:
        raise UsageError(f"--workers {count}: more workers than the workload's {len(trees)} conversations"
                         + (" (agent trees)" if len(trees) < len(workload.conversations) else ""))
    shares = []
    for k in range(count):
        concurrency = load.concurrency // count + (1 if k < load.concurrency % count else 0)
        update: dict[str, Any] = {"concurrency": concurrency, **worker_share(load, count)}
        part = dataclasses.replace(workload, conversations=_of_worker(trees, k, count))
        shares.append(Share(k, count, load.model_copy(update=update), part))
    return shares


class SharedActivity:
    """The client's Activity (when the engine last made progress), in memory every worker and the driver see."""

    __slots__ = ("_value",)

    def __init__(self, value: c_int64) -> None:
        self._value = value

    @property
    def last_ns(self) -> int:
        return self._value.value

    @last_ns.setter
    def last_ns(self, ns: int) -> None:
        if ns > self._value.value:  # a worker's stale write never moves progress back
            self._value.value = ns


@dataclass(frozen=True, slots=True)
class Shared:
    """The memory the driver and every worker share (multiprocessing RawValue, RawArray and Lock)."""

    stop: c_int  # GO, NO_NEW, CANCEL
    activity: c_int64  # the engine's last progress (SharedActivity)
    in_flight: Any  # ctypes array of c_int, one per worker
    queued: Any  # likewise: requests due and waiting in the worker for a concurrency slot
    at_target: Any  # likewise: of those in flight, the ones sent to the target (LiveState.at_target)
    next_start: c_int64  # the earliest time the next request may start, under max_rps
    starts: Lock | None  # over next_start (only with max_rps: a lock brings multiprocessing's resource tracker)
    start_every_ns: int  # 1 / max_rps, 0 without it

    @classmethod
    def create(cls, context: Any, workers: int, max_rps: float | None) -> Shared:
        return cls(context.RawValue(c_int, GO), context.RawValue(c_int64, 0), context.RawArray(c_int, workers),
                   context.RawArray(c_int, workers), context.RawArray(c_int, workers), context.RawValue(c_int64, 0),
                   context.Lock() if max_rps else None, int(1e9 / max_rps) if max_rps else 0)


class SharedStarts:
    """[load] max_rps over every worker at once: one schedule of start times 1/max_rps apart, in shared memory,
    each taken under a lock (held for a read and a write), so no one-second window holds more than max_rps starts
    whichever worker makes them. Dividing max_rps by N instead would let each worker's spacing drift against the
    others' and a window hold up to N starts more."""

    def __init__(self, shared: Shared) -> None:
        assert shared.starts is not None, "SharedStarts needs max_rps"
        self._shared, self._lock = shared, shared.starts

    async def acquire(self) -> None:
        """Returns when a start is allowed: at least 1/max_rps after the start before it, taken by any worker.
        The spacing is from actual starts, not from a schedule, so a wait that ends late grants no credit."""
        while True:
            with self._lock:
                now = time.perf_counter_ns()
                wait = self._shared.next_start.value - now
                if wait <= 0:
                    self._shared.next_start.value = now + self._shared.start_every_ns
                    return
            await asyncio.sleep(wait / 1e9)


def _worker(share: Share, config: ClientConfig, seed: int, shared: Shared, out: Connection, go: Connection,
            parent: int) -> None:
    """A worker process: says it is ready, waits for the load's time zero, then runs its share until done or
    stopped; every record goes to `out`, then Finished."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    error = None
    try:
        out.send(Ready())
        started_ns = go.recv()
        if started_ns is not None:
            asyncio.run(_work(share, config, seed, started_ns, shared, out, parent))
    except EOFError:
        pass  # the driver went away before the load started
    except Exception as exc:  # noqa: BLE001 - said to the driver, which names it in the report
        error = f"{type(exc).__name__}: {exc}"
    finally:
        out.send(Finished(error))
        out.close()


async def _work(share: Share, config: ClientConfig, seed: int, started_ns: int, shared: Shared, out: Connection,
                parent: int) -> None:
    live = LiveState(started_ns, None, None)
    stopped = asyncio.Event()
    async with Client(config, activity=SharedActivity(shared.activity)) as client:
        starts = SharedStarts(shared) if shared.start_every_ns else None
        arrivals = Arrivals(share.load, share.workload, seed, client, live, stopped, out.send, stream=share.index,
                            streams=share.count, starts=starts)
        task = asyncio.create_task(arrivals.run())
        while not task.done():
            level = shared.stop.value
            if level >= NO_NEW:
                stopped.set()
            if level >= CANCEL or os.getppid() != parent:
                task.cancel()
            shared.in_flight[share.index], shared.queued[share.index] = live.in_flight, live.queued
            shared.at_target[share.index] = live.at_target
            await asyncio.wait({task}, timeout=POLL_S)
        shared.in_flight[share.index] = shared.queued[share.index] = shared.at_target[share.index] = 0
        if not task.cancelled():
            task.result()


class WorkerArrivals:
    """The load sent from worker processes (load/backend/base.py's LoadBackend)."""

    name: BackendName = "processes"

    def __init__(self, setup: LoadSetup, count: int) -> None:
        self.workers = count
        self._shares = split(setup.load, setup.workload, count)
        self._setup = setup
        self._config = setup.client.config
        context = multiprocessing.get_context("spawn")
        self._context = context
        self._shared = Shared.create(context, count, setup.load.max_rps)
        setup.client.activity = SharedActivity(self._shared.activity)  # the driver's metrics count as progress too
        self.pids: list[int] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        self._go: list[Connection] = []
        self._finished: list[asyncio.Future[str | None]] = []  # each worker's error, None when it ended well

    async def abort(self, count: int) -> tuple[int, int]:
        """Requests in flight are in other processes: abort bursts are refused with workers (api.run_options)."""
        return 0, 0

    def notes(self) -> list[str]:
        if not self._setup.load.max_rps:
            return []
        return [f"max_rps: one schedule of starts for the {self.workers} worker processes together, so no "
                f"one-second window held more than {self._setup.load.max_rps:g} starts"]

    async def prepare(self) -> None:
        """Starts the workers and waits until each is ready (spawned processes import loadrepro first, about a
        second), so that the load's time zero is not spent starting them."""
        loop = asyncio.get_running_loop()
        for share in self._shares:
            receive, send = self._context.Pipe(duplex=False)
            wait, go = self._context.Pipe(duplex=False)
            process = self._context.Process(
                target=_worker, name=f"loadrepro-worker-{share.index}", daemon=True,
                args=(share, self._config, self._setup.seed, self._shared, send, wait, os.getpid()))
            process.start()
            send.close()
            wait.close()
            self._processes.append(process)
            self._go.append(go)
            self.pids.append(process.pid or 0)
            if not isinstance(await asyncio.to_thread(_first, receive), Ready):
                crashed = self._end()
                raise WorkerCrashed(f"load worker {share.index} ended before it was ready"
                                    + (f" ({'; '.join(crashed)})" if crashed else ""))
            done: asyncio.Future[str | None] = loop.create_future()
            threading.Thread(target=self._read, args=(receive, loop, done), daemon=True,
                             name=f"loadrepro-worker-{share.index}-records").start()
            self._finished.append(done)

    async def run(self) -> None:
        if not self._processes:
            await self.prepare()
        for go in self._go:
            go.send(self._setup.live.started_ns)
        try:
            await self._mirror(self._finished)
        except asyncio.CancelledError:
            self._shared.stop.value = CANCEL
            await asyncio.shield(asyncio.wait(self._finished, timeout=DRAIN_S))
            raise
        finally:
            crashed = self._end()
        if crashed:
            raise WorkerCrashed(CRASHED + "; ".join(crashed))

    async def _mirror(self, finished: list[asyncio.Future[str | None]]) -> None:
        """Pass the driver's stop to the workers and their requests in flight to the progress display; a worker
        that failed cancels the others."""
        live = self._setup.live
        while not all(f.done() for f in finished):
            if self._setup.stopped.is_set() and self._shared.stop.value < NO_NEW:
                self._shared.stop.value = NO_NEW
            if any(f.done() and f.result() is not None for f in finished):
                self._shared.stop.value = CANCEL
            live.in_flight, live.queued = sum(self._shared.in_flight), sum(self._shared.queued)
            live.at_target = sum(self._shared.at_target)
            await asyncio.wait(finished, timeout=POLL_S)
        live.in_flight = live.queued = live.at_target = 0

    def _read(self, receive: Connection, loop: asyncio.AbstractEventLoop, done: asyncio.Future[str | None]) -> None:
        """On its own thread: a worker's records into the driver's loop, in the order they were sent; `done` gets
        the worker's error, or "no last word" when it died without one."""
        error: str | None = "it died without its last word"
        try:
            while not isinstance(message := receive.recv(), Finished):
                loop.call_soon_threadsafe(self._setup.on_record, message)
            error = message.error
        except (EOFError, OSError):
            pass
        finally:
            receive.close()
            loop.call_soon_threadsafe(_settle, done, error)

    def _end(self) -> list[str]:
        """Ends every worker (each has had its chance to finish); what went wrong with any of them."""
        for go in self._go:
            go.close()  # a worker still waiting for time zero ends
        failed = []
        for i, process in enumerate(self._processes):
            process.join(timeout=5.0)
            if process.is_alive():
                process.kill()
                process.join()
            finished = self._finished[i] if i < len(self._finished) else None  # none: it never said it was ready
            error = finished.result() if finished is not None and finished.done() else None
            if process.exitcode or error:
                failed.append(f"{process.name} " + (f"raised {error}" if error and process.exitcode == 0
                                                    else f"exited with code {process.exitcode}"))
        return failed


def _first(receive: Connection) -> object:
    try:
        return receive.recv()
    except EOFError:
        return None


def _settle(done: asyncio.Future[str | None], error: str | None) -> None:
    """A worker's ending, told once (the pump and a failed start may both tell it)."""
    if not done.done():
        done.set_result(error)
