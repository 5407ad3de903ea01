"""What the progress display shows of a run, updated as things happen."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from loadrepro.load.pause import pause


@dataclass(slots=True)
class LiveState:
    started_ns: int
    total: int | None  # requests planned, when known (not in soaks)
    deadline_s: float | None
    in_flight: int = 0
    at_target: int = 0  # of those in flight, the ones sent to the target (not a replica): its metrics' counterpart
    queued: int = 0  # due but waiting in loadrepro for a concurrency slot (or a max_rps start)
    outcomes: Counter[str] = field(default_factory=Counter)
    health: int | str | None = None
    kv_usage: float | None = None
    stopping: str | None = None
    finished: bool = False


async def report_progress(live: LiveState, progress: Callable[[LiveState], Awaitable[None]],
                          stop: asyncio.Event) -> None:
    """The live state told to `progress` every half second until `stop`, then once more, finished."""
    while not stop.is_set():
        await progress(live)
        await pause(stop, 0.5)
    live.finished = True
    await progress(live)
