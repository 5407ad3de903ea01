"""The memory of an engine loadrepro started, read beside the health polls: its process group's resident,
anonymous and swapped memory from /proc (Linux). It is read on the clock and also at request milestones (the
warm-up's end, every tenth of the requests planned: `milestones`), so that a run quicker than a few readings of the
clock is still read often enough to judge whether memory grew with the requests served. Read by hand: psutil exposes
no RssAnon, and /proc/PID/status is one cheap read a process (smaps, which psutil's full memory info reads, costs
milliseconds on a large engine)."""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable
from pathlib import Path

from loadrepro.judge.memory import WARM_UP_SHARE
from loadrepro.load.pause import woken
from loadrepro.records import MemorySample

PROC = Path("/proc")
_FIELDS = {"VmRSS:": 0, "RssAnon:": 1, "VmSwap:": 2}  # kB in /proc/PID/status


def group_memory(pgid: int, proc: Path = PROC) -> tuple[int, int, int, int] | None:
    """(rss, anon, swap, processes) in bytes over every process of the group; None when none is left."""
    totals, count = [0, 0, 0], 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # pgrp is the 5th field, after the command in parentheses (which may hold spaces)
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            status = (entry / "status").read_text()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
        count += 1
        for line in status.splitlines():
            index = _FIELDS.get(line.split(":", 1)[0] + ":")
            if index is not None:
                totals[index] += int(line.split()[1]) * 1024
    return (totals[0], totals[1], totals[2], count) if count else None


MILESTONE_SHARE = 0.1  # a reading each time another tenth of the planned requests has been served


def milestones(total: int | None) -> list[int]:
    """The requests served at which memory is read besides the clock: the warm-up's end (judge/memory.py) and every
    tenth of `total`, ascending; none when the total is not known (a soak, read on the clock for its length)."""
    if not total:
        return []
    shares = {WARM_UP_SHARE, *(k * MILESTONE_SHARE for k in range(1, round(1 / MILESTONE_SHARE) + 1))}
    return sorted({max(1, math.ceil(total * share - 1e-9)) for share in shares})


class Milestones:
    """Which served counts are milestones still to come (a count may jump past several at once)."""

    def __init__(self, total: int | None) -> None:
        self._left = milestones(total)

    def passed(self, served: int) -> bool:
        """True once per crossing: `served` reached the next milestone (any passed meanwhile are spent with it)."""
        if not self._left or served < self._left[0]:
            return False
        while self._left and served >= self._left[0]:
            self._left.pop(0)
        return True


class MemoryWatcher:
    def __init__(self, pgid: Callable[[], int | None], interval_s: float, on_sample: Callable[[MemorySample], None],
                 clock: Callable[[], int], served: Callable[[], int]) -> None:
        """`pgid`: the engine's process group (None while it is not running); `served`: requests answered so far."""
        self._pgid, self._interval_s, self._on_sample = pgid, interval_s, on_sample
        self._clock, self._served = clock, served
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """Read now rather than at the next interval (a request milestone was reached)."""
        self._wake.set()

    async def read(self) -> MemorySample | None:
        """One reading (off the event loop: a large engine has many processes), told to `on_sample`."""
        pgid = self._pgid()
        if pgid is None:
            return None
        read = await asyncio.to_thread(group_memory, pgid)
        if read is None:
            return None
        sample = MemorySample(self._clock(), *read[:3], served=self._served(), processes=read[3])
        self._on_sample(sample)
        return sample

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._wake.clear()
            await self.read()
            await woken(stop, self._wake, self._interval_s)


def readable() -> bool:
    """Whether this machine has /proc to read (Linux)."""
    return os.path.isdir(PROC / "self")
