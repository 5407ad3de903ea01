"""Reports rewritten while a long run goes on, so that a run killed by SIGKILL or a CI timeout leaves a valid
report no older than `[load] checkpoint_s`: verdict `running`, `finished` false, everything recorded so far.

A checkpoint is judged and written on a worker thread from a snapshot taken on the event loop; files are replaced
atomically (write, then rename), so a reader never sees half a report. Stopping waits for a checkpoint being
written, so that it cannot land after the final report.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from loadrepro.config.profile import LoadSpec
from loadrepro.load.pause import pause
from loadrepro.records import RunResult


class Checkpoints:
    def __init__(self, every_s: float, snapshot: Callable[[], RunResult], write: Callable[[RunResult], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._every_s, self._snapshot, self._write, self._clock = every_s, snapshot, write, clock
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.seconds = 0.0  # spent judging and writing, in all
        self.failed: str | None = None  # why checkpoints stopped early, if they did

    def start(self) -> None:
        if self._every_s > 0:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while not await pause(self._stop, self._every_s):
            started = self._clock()
            try:
                await asyncio.to_thread(self._write, self._snapshot())
            except Exception as exc:  # noqa: BLE001 - a checkpoint that cannot be written must not end the run
                self.failed = f"{type(exc).__name__}: {exc}"
                return
            self.written += 1
            self.seconds += self._clock() - started


def interval_s(load: LoadSpec) -> float:
    """The profile's interval; unset, 60 s for a soak (a run with a duration) and none otherwise."""
    if load.checkpoint_s is not None:
        return load.checkpoint_s
    return 60.0 if load.duration_s else 0.0
