"""The warm-ups of a mid-trajectory start ([workload] trajectory_start): sent through the run's client before the
load, at most `concurrency` at once, their records kept in warmup.jsonl and out of the judged requests, so that
the run is judged on the trees' turns from their points on, against a cache that holds each session's history."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from loadrepro.load.client import Client
from loadrepro.records import Outcome, RequestRecord
from loadrepro.records.jsonl import JsonlWriter
from loadrepro.workload.model import PlannedRequest

WARMUP_FILE = "warmup.jsonl"


@dataclass(frozen=True, slots=True)
class WarmedUp:
    sent: int
    outcomes: dict[str, int]
    first_failure: str  # "" when every warm-up completed
    seconds: float

    def note(self) -> str:
        counts = ", ".join(f"{name} {n}" for name, n in sorted(self.outcomes.items()))
        line = (f"mid-trajectory start: {self.sent} warm-up requests sent before the load in {self.seconds:.1f} s "
                f"({counts}; not judged, in {WARMUP_FILE})")
        return line + (f"; the first that failed: {self.first_failure}" if self.first_failure else "")


async def warm_up(client: Client, warmups: tuple[PlannedRequest, ...], concurrency: int, stopped: asyncio.Event,
                  run_dir: Path) -> WarmedUp:
    """Every warm-up sent (none after `stopped` is set), each record written as it ends."""
    began = time.perf_counter()
    slots = asyncio.Semaphore(max(1, concurrency))
    writer = JsonlWriter(run_dir / WARMUP_FILE)
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
                    f"{first.outcome.value}, {first.detail[:200]}", time.perf_counter() - began)
