"""What the progress display shows of a run, updated as things happen."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


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
