"""Scale-out on one machine (`--workers N`): the workload's conversations split over N processes, each running
drive/arrivals.py and its own client on its own event loop, every record streamed back to the driver, which
stays the one writer of requests.jsonl and the only one watching the engine (health, metrics, log).

- Conversation i goes to worker i mod N, so the same seed always gives the same split; concurrency is split so
  the shares add up to [load] concurrency, and rate is divided by N; max_rps holds for the workers together
  (SharedStarts).
- One time axis: records are stamped with time.perf_counter_ns, CLOCK_MONOTONIC on Linux, one clock for every
  process of the machine, so the workers' times need no offset (residual error: none beyond the clock's own).
- Shared memory carries what must cross at once: the stop level (0 go on, 1 start no new request, 2 cancel what
  is in flight), the engine's last progress (so a request waiting for its first token in one worker is not
  stalled while another worker's streams, or the driver's metrics, move), and each worker's requests in flight.
  Workers look at it every 50 ms, so a stop reaches them well within a second; they ignore SIGINT and SIGTERM
  (a terminal's Ctrl-C reaches the whole process group) and stop when the driver does, or when it is gone.
- Processes are spawned, not forked: the driver has threads (the record writers) by then.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from loadrepro.drive.arrivals import Arrivals
from loadrepro.drive.client import Client, ClientConfig
from loadrepro.drive.live import LiveState
from loadrepro.errors import InternalError, UsageError
from loadrepro.profile import LoadSpec
from loadrepro.records import RequestRecord
from loadrepro.workload.model import Workload

POLL_S = 0.05
GO, NO_NEW, CANCEL = 0, 1, 2
READY = "ready"
_DRAIN_S = 15.0  # how long cancelled workers may take to send their last records before they are killed


@dataclass(frozen=True, slots=True)
class Share:
    """One worker's part of the run."""

    index: int
    count: int  # workers in all
    load: LoadSpec
    workload: Workload


def split(load: LoadSpec, workload: Workload, count: int) -> list[Share]:
    if count < 1:
        raise UsageError(f"--workers {count}: at least 1")
    if load.concurrency < count:
        raise UsageError(f"--workers {count}: more workers than [load] concurrency ({load.concurrency}) leaves a "
                         f"worker without a request slot")
    if len(workload.conversations) < count:
        raise UsageError(f"--workers {count}: more workers than the workload's {len(workload.conversations)} "
                         f"conversations")
    shares = []
    for k in range(count):
        concurrency = load.concurrency // count + (1 if k < load.concurrency % count else 0)
        update: dict[str, Any] = {"concurrency": concurrency}
        if load.rate:
            update["rate"] = load.rate / count
        if load.max_rps:
            update["max_rps"] = load.max_rps / count
        part = dataclasses.replace(workload, conversations=workload.conversations[k::count])
        shares.append(Share(k, count, load.model_copy(update=update), part))
    return shares


class SharedActivity:
    """The client's Activity (when the engine last made progress), in memory every worker and the driver see."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    @property
    def last_ns(self) -> int:
        return self._value.value

    @last_ns.setter
    def last_ns(self, ns: int) -> None:
        if ns > self._value.value:  # a worker's stale write never moves progress back
            self._value.value = ns


@dataclass(frozen=True, slots=True)
class _Shared:
    stop: Any  # RawValue int: GO, NO_NEW, CANCEL
    activity: Any  # RawValue int64
    in_flight: Any  # RawArray int, one per worker
    next_start: Any  # RawValue int64: the earliest time the next request may start, under max_rps
    starts: Any  # a Lock over next_start (only with max_rps: a lock brings multiprocessing's resource tracker)
    start_every_ns: int  # 1 / max_rps, 0 without it


class SharedStarts:
    """[load] max_rps over every worker at once: one schedule of start times 1/max_rps apart, in shared memory,
    each taken under a lock (held for a read and a write), so no one-second window holds more than max_rps starts
    whichever worker makes them. Dividing max_rps by N instead would let each worker's spacing drift against the
    others' and a window hold up to N starts more."""

    def __init__(self, shared: _Shared) -> None:
        self._shared = shared

    async def acquire(self) -> None:
        """Returns when a start is allowed: at least 1/max_rps after the start before it, taken by any worker.
        The spacing is from actual starts, not from a schedule, so a wait that ends late grants no credit."""
        while True:
            with self._shared.starts:
                now = time.perf_counter_ns()
                wait = self._shared.next_start.value - now
                if wait <= 0:
                    self._shared.next_start.value = now + self._shared.start_every_ns
                    return
            await asyncio.sleep(wait / 1e9)


def _worker(share: Share, config: ClientConfig, seed: int, shared: _Shared, out: Connection, go: Connection,
            parent: int) -> None:
    """A worker process: says it is ready, waits for the load's time zero, then runs its share until done or
    stopped; every record goes to `out`, then None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        out.send(READY)
        started_ns = go.recv()
        if started_ns is not None:
            asyncio.run(_work(share, config, seed, started_ns, shared, out, parent))
    except EOFError:
        pass  # the driver went away before the load started
    finally:
        out.send(None)
        out.close()


async def _work(share: Share, config: ClientConfig, seed: int, started_ns: int, shared: _Shared, out: Connection,
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
            shared.in_flight[share.index] = live.in_flight
            await asyncio.wait({task}, timeout=POLL_S)
        shared.in_flight[share.index] = 0
        if not task.cancelled():
            task.result()


class WorkerArrivals:
    """Arrivals spread over worker processes, with the interface of drive.arrivals.Arrivals: `run()` sends the
    workload until it is done; `stopped` set means start no new request; cancelling `run()` cancels what is in
    flight, and returns only once every worker has sent its last record."""

    def __init__(self, load: LoadSpec, workload: Workload, seed: int, client: Client, live: LiveState,
                 stopped: asyncio.Event, on_record: Callable[[RequestRecord], None], count: int) -> None:
        self._shares = split(load, workload, count)
        self._config, self._seed, self._live, self._stopped = client.config, seed, live, stopped
        self._on_record = on_record
        context = multiprocessing.get_context("spawn")
        self._context = context
        self._shared = _Shared(context.RawValue(ctypes.c_int, GO), context.RawValue(ctypes.c_int64, 0),
                               context.RawArray(ctypes.c_int, count), context.RawValue(ctypes.c_int64, 0),
                               context.Lock() if load.max_rps else None,
                               int(1e9 / load.max_rps) if load.max_rps else 0)
        client.activity = SharedActivity(self._shared.activity)  # the driver's metrics count as progress too
        self.pids: list[int] = []
        self._processes: list[multiprocessing.Process] = []
        self._go: list[Connection] = []
        self._finished: list[asyncio.Future] = []

    async def prepare(self) -> None:
        """Starts the workers and waits until each is ready (spawned processes import loadrepro first, about a
        second), so that the load's time zero is not spent starting them."""
        loop = asyncio.get_running_loop()
        for share in self._shares:
            receive, send = self._context.Pipe(duplex=False)
            wait, go = self._context.Pipe(duplex=False)
            process = self._context.Process(
                target=_worker, name=f"loadrepro-worker-{share.index}", daemon=True,
                args=(share, self._config, self._seed, self._shared, send, wait, os.getpid()))
            process.start()
            send.close()
            wait.close()
            self._processes.append(process)
            self._go.append(go)
            self.pids.append(process.pid)
            if await asyncio.to_thread(_first, receive) != READY:
                self._end()
                raise InternalError(f"load worker {share.index} ended before it was ready")
            done = loop.create_future()
            threading.Thread(target=self._read, args=(receive, loop, done), daemon=True,
                             name=f"loadrepro-worker-{share.index}-records").start()
            self._finished.append(done)

    async def run(self) -> None:
        if not self._processes:
            await self.prepare()
        for go in self._go:
            go.send(self._live.started_ns)
        try:
            await self._mirror(self._finished)
        except asyncio.CancelledError:
            self._shared.stop.value = CANCEL
            await asyncio.shield(self._drain(self._finished))
            raise
        finally:
            self._end()

    async def _mirror(self, finished: list[asyncio.Future]) -> None:
        """Pass the driver's stop to the workers and their requests in flight to the progress display."""
        while not all(f.done() for f in finished):
            if self._stopped.is_set() and self._shared.stop.value < NO_NEW:
                self._shared.stop.value = NO_NEW
            self._live.in_flight = sum(self._shared.in_flight)
            await asyncio.wait(finished, timeout=POLL_S)
        self._live.in_flight = 0

    async def _drain(self, finished: list[asyncio.Future]) -> None:
        await asyncio.wait(finished, timeout=_DRAIN_S)

    def _read(self, receive: Connection, loop: asyncio.AbstractEventLoop, done: asyncio.Future) -> None:
        """On its own thread: a worker's records into the driver's loop, in the order they were sent."""
        try:
            while (record := receive.recv()) is not None:
                loop.call_soon_threadsafe(self._on_record, record)
        except (EOFError, OSError):
            pass  # the worker died without its last word: _end says so
        finally:
            receive.close()
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

    def _end(self) -> None:
        for go in self._go:
            go.close()  # a worker still waiting for time zero ends
        failed = []
        for process in self._processes:
            process.join(timeout=5.0)
            if process.is_alive():
                process.kill()
                process.join()
            if process.exitcode:
                failed.append(f"{process.name} exited with code {process.exitcode}")
        if failed:
            raise InternalError("a load worker failed, so part of the load is missing: " + "; ".join(failed))


def _first(receive: Connection) -> object:
    try:
        return receive.recv()
    except EOFError:
        return None
