"""The one seam between the runner and what sends its load: this process (load/arrivals.py), worker processes on
this machine (processes.py) or Ray actors over a cluster (ray_actors.py). The runner gives a backend a LoadSetup
and asks it only what LoadBackend declares.

What every backend does alike: `prepare()` starts what must be running before the load's time zero; `run()` sends
the workload until it is done, or until `stopped` is set (no new request starts), and cancelling it cancels what
is in flight; every record reaches `on_record` on the runner's event loop, on the runner's clock. A worker that
dies ends `run()` with WorkerCrashed once the other workers have stopped, so the run keeps everything received.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from loadrepro.config.profile import BackendName, LoadSpec
from loadrepro.errors import LoadreproError
from loadrepro.load.client import Client
from loadrepro.load.live import LiveState
from loadrepro.records import RequestRecord
from loadrepro.workload.model import Workload

DRAIN_S = 15.0  # how long cancelled workers may take to send their last records before they are ended
CRASHED = "a load worker failed, so part of the load is missing: "  # how WorkerCrashed's words begin


@dataclass(frozen=True, slots=True)
class LoadSetup:
    """What a backend is given to send a run's load."""

    load: LoadSpec
    workload: Workload
    seed: int
    client: Client  # the runner's: its config is every worker's, its activity the engine's last progress
    live: LiveState  # requests in flight, for the progress display
    stopped: asyncio.Event  # set: start no new request
    on_record: Callable[[RequestRecord], None]


class WorkerCrashed(LoadreproError):
    """A worker process or actor died, or its share of the load raised: loadrepro's own failure, and the load that
    was sent is only part of the workload."""


class LoadBackend(Protocol):
    name: BackendName
    workers: int

    async def prepare(self) -> None:
        """Starts what must run before the load's time zero."""

    async def run(self) -> None:
        """Sends the load (see the module's docstring); raises WorkerCrashed when a worker died."""

    def notes(self) -> list[str]:
        """What the report says of how the load was sent (clocks, how max_rps was shared)."""

    async def abort(self, count: int) -> tuple[int, int]:
        """Cancels up to `count` requests in flight at once (a [[chaos.events]] abort burst, load/arrivals.py);
        how many, and how many of them mid-answer."""


class InProcess:
    """The load sent from this process's event loop."""

    name: BackendName = "in-process"
    workers = 1

    def __init__(self, setup: LoadSetup, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        from loadrepro.load.arrivals import Arrivals

        self._arrivals = Arrivals(setup.load, setup.workload, setup.seed, setup.client, setup.live, setup.stopped,
                                  setup.on_record, clock)

    async def prepare(self) -> None:
        """Nothing starts before time zero."""

    async def run(self) -> None:
        await self._arrivals.run()

    async def abort(self, count: int) -> tuple[int, int]:
        return await self._arrivals.abort(count)

    def notes(self) -> list[str]:
        return []
