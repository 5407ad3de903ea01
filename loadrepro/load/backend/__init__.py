"""What sends a run's load, behind one seam (base.py's LoadBackend): this process, worker processes on this
machine (processes.py) or Ray actors over a cluster (ray_actors.py). `backend_for` chooses; the two that spread
the load are imported only when chosen (Ray is a heavy import, and most runs use neither)."""

from __future__ import annotations

import time
from collections.abc import Callable

from loadrepro.load.backend.base import InProcess, LoadBackend, LoadSetup


def backend_for(setup: LoadSetup, workers: int, ray: str | None,
                clock: Callable[[], int] = time.perf_counter_ns) -> LoadBackend:
    """`ray` ("local" or a cluster's address): `workers` Ray actors; else `workers` > 1: worker processes; else
    this process (on `clock`; workers keep the machine's monotonic clock)."""
    if ray:
        from loadrepro.load.backend.ray_actors import RayArrivals

        return RayArrivals(setup, workers, None if ray == "local" else ray)
    if workers > 1:
        from loadrepro.load.backend.processes import WorkerArrivals

        return WorkerArrivals(setup, workers)
    return InProcess(setup, clock)
