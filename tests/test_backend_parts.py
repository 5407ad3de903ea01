"""The pieces the scale-out backends share, each alone and in process: the start schedule max_rps keeps over every
worker, the progress every worker sees, and the checkpoints a long run writes (the split of a workload over
workers: test_workers.py)."""

import asyncio
import ctypes
import multiprocessing

from loadrepro.load.backend.processes import Shared, SharedActivity, SharedStarts
from loadrepro.runs.checkpoints import Checkpoints
from tests.builders import result


def shared(max_rps: float) -> Shared:
    return Shared.create(multiprocessing.get_context("spawn"), 2, max_rps)


async def test_starts_taken_by_many_at_once_are_spaced_one_over_max_rps_apart():
    schedule = shared(max_rps=50.0)
    starts, taken = SharedStarts(schedule), []

    async def take() -> None:
        await starts.acquire()
        # the start it was granted, as the schedule holds it: a clock read here instead would count the time the
        # machine took to resume this process, which a busy machine makes longer for one taker than the next
        taken.append(schedule.next_start.value - schedule.start_every_ns)

    await asyncio.wait_for(asyncio.gather(*(take() for _ in range(12))), 30)
    gaps = [b - a for a, b in zip(sorted(taken), sorted(taken)[1:])]
    assert len(taken) == 12 and min(gaps) >= 1e9 / 50.0  # the schedule's spacing


def test_progress_every_worker_sees_never_moves_back():
    activity = SharedActivity(multiprocessing.get_context("spawn").RawValue(ctypes.c_int64, 0))
    activity.last_ns = 500
    activity.last_ns = 300  # a worker's stale write
    assert activity.last_ns == 500
    activity.last_ns = 900
    assert activity.last_ns == 900


async def test_checkpoints_write_until_stopped_and_never_after():
    written, enough = [], asyncio.Event()

    def write(run) -> None:
        written.append(run)
        if len(written) == 3:
            enough.set()

    checkpoints = Checkpoints(0.01, lambda: result(), write)
    checkpoints.start()
    await asyncio.wait_for(enough.wait(), 30)
    await checkpoints.stop()  # returns once the writing task has ended: nothing is written after it
    assert len(written) == checkpoints.written >= 3 and checkpoints.failed is None


async def test_a_checkpoint_that_cannot_be_written_stops_checkpoints_not_the_run():
    tried = asyncio.Event()
    loop = asyncio.get_running_loop()

    def write(run) -> None:
        loop.call_soon_threadsafe(tried.set)
        raise OSError("disk full")

    checkpoints = Checkpoints(0.01, lambda: result(), write)
    checkpoints.start()
    await asyncio.wait_for(tried.wait(), 30)
    await checkpoints.stop()  # returns once the failed write has been seen
    assert checkpoints.failed == "OSError: disk full" and checkpoints.written == 0
