"""How much writing one 32,768-token stream's record delays the other streams' chunk timestamps.

64 tasks stand in for streams: each wakes every millisecond and notes how late it woke (a chunk arriving then
would be stamped that late). Meanwhile records of 32,768 chunk times (dsa-prefix-shared's output cap) are written
every 50 ms, either on the loop as loadrepro once did (dataclasses.asdict + json.dumps + flush) or through
JsonlWriter (orjson in a writer thread). Prints the streams' lateness while writing, against none written.

    python benchmarks/record_write.py
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from loadrepro.records import JsonlWriter, Outcome, RequestRecord

STREAMS, TICK_S, WRITES, EVERY_S = 64, 0.001, 20, 0.05


def big_record() -> RequestRecord:
    start = time.perf_counter_ns()
    chunks = tuple(start + i * 10_000_000 for i in range(32_768))
    return RequestRecord(id=1, conversation=1, turn=2, outcome=Outcome.OK, detail="", status=200, wall_time=time.time(),
                         queued_ns=start, sent_ns=start, first_byte_ns=start, first_token_ns=chunks[0],
                         end_ns=chunks[-1], chunk_ns=chunks, finish_reason="length", prompt_tokens=81_000,
                         completion_tokens=32_768, cached_tokens=80_000, expected_prompt_tokens=81_000,
                         shared_prefix_tokens=80_000, max_tokens=32_768)


async def stream(late: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    due = loop.time() + TICK_S
    while not stop.is_set():
        await asyncio.sleep(max(0.0, due - loop.time()))
        late.append(loop.time() - due)
        due = max(due + TICK_S, loop.time())


async def measure(write) -> np.ndarray:
    late: list[float] = []
    stop = asyncio.Event()
    tasks = [asyncio.create_task(stream(late, stop)) for _ in range(STREAMS)]
    await asyncio.sleep(0.1)
    late.clear()
    for _ in range(WRITES):
        if write is not None:
            write()
        await asyncio.sleep(EVERY_S)
    stop.set()
    await asyncio.gather(*tasks)
    return np.array(late) * 1e3


def main() -> None:
    record = big_record()
    folder = Path(tempfile.mkdtemp())
    print(f"one record: {len(json.dumps(dataclasses.asdict(record))) / 1e6:.2f} MB of JSON; {STREAMS} streams "
          f"ticking every {TICK_S * 1e3:.0f} ms; {WRITES} records written {EVERY_S * 1e3:.0f} ms apart")
    old = (folder / "old.jsonl").open("w")

    def on_loop() -> None:
        old.write(json.dumps({**dataclasses.asdict(record), "kind": "request"}, separators=(",", ":")) + "\n")
        old.flush()

    writer = JsonlWriter(folder / "new.jsonl")
    for name, write in (("nothing written", None), ("on the loop (asdict + json)", on_loop),
                        ("JsonlWriter (orjson, writer thread)", lambda: writer.write(record))):
        late = asyncio.run(measure(write))
        print(f"  {name:38} stream lateness p50 {np.percentile(late, 50):6.3f} ms  "
              f"p99 {np.percentile(late, 99):6.3f} ms  max {late.max():6.3f} ms")
    writer.close()


if __name__ == "__main__":
    main()
