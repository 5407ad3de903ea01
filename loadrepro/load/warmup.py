"""Requests sent before the load and not judged, through the run's client, at most `concurrency` at once, their
records kept in a file of their own and out of the judged requests. Two kinds: the engine's warm-ups ([load]
warmup_requests, workload/warmups.py), which warm its code paths and none of the run's prefixes, so that a cold
start is not judged as the engine's failure; then the warm-ups of a mid-trajectory start ([workload]
trajectory_start), so that the run is judged on the trees' turns from their points on, against a cache that holds
each session's history."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from loadrepro.load.client import Client
from loadrepro.records import Outcome, RequestRecord
from loadrepro.records.jsonl import JsonlWriter
from loadrepro.workload.model import PlannedRequest

WARMUP_FILE = "warmup.jsonl"  # a mid-trajectory start's
ENGINE_WARMUP_FILE = "engine-warmup.jsonl"  # [load] warmup_requests'
WarmupKind = Literal["engine", "trajectory"]
_KINDS: dict[WarmupKind, tuple[str, str, str]] = {  # its file, what its note starts with, what it says of them
    "engine": (ENGINE_WARMUP_FILE, "warm-up ([load] warmup_requests)",
               "each one of the run's first requests with its words shuffled and salted, so that none warmed the "
               "run's prefixes"),
    "trajectory": (WARMUP_FILE, "mid-trajectory start", ""),
}


@dataclass(frozen=True, slots=True)
class WarmedUp:
    sent: int
    outcomes: dict[str, int]
    first_failure: str  # "" when every warm-up completed
    seconds: float
    kind: WarmupKind = "trajectory"

    def note(self) -> str:
        file, starts, what = _KINDS[self.kind]
        counts = ", ".join(f"{name} {n}" for name, n in sorted(self.outcomes.items()))
        line = (f"{starts}: {self.sent} warm-up requests sent before the load in {self.seconds:.1f} s "
                f"({counts}; not judged, in {file}){'; ' + what if what else ''}")
        return line + (f"; the first that failed: {self.first_failure}" if self.first_failure else "")


async def warm_up(client: Client, warmups: tuple[PlannedRequest, ...], concurrency: int, stopped: asyncio.Event,
                  run_dir: Path, kind: WarmupKind = "trajectory") -> WarmedUp:
    """Every warm-up sent (none after `stopped` is set), each record written as it ends."""
    began = time.perf_counter()
    slots = asyncio.Semaphore(max(1, concurrency))
    writer = JsonlWriter(run_dir / _KINDS[kind][0])
    records: list[RequestRecord] = []

    def kept(record: RequestRecord) -> None:
        records.append(record)
        writer.write(record)

    async def one(request_id: int, planned: PlannedRequest) -> None:
        async with slots:
            if not stopped.is_set():
                await client.send(request_id, planned, time.perf_counter_ns(), time.time(), kept)

    try:
        async with asyncio.TaskGroup() as tg:
            for request_id, planned in enumerate(warmups, 1):
                tg.create_task(one(request_id, planned))
    finally:
        writer.close()
    failed = [r for r in records if r.outcome is not Outcome.OK]
    first = min(failed, key=lambda r: r.end_ns, default=None)
    return WarmedUp(len(records), dict(Counter(r.outcome.value for r in records)),
                    "" if first is None else f"request {first.id} (conversation {first.conversation}): "
                    f"{first.outcome.value}, {first.detail[:200]}", time.perf_counter() - began, kind)
