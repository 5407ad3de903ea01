"""Benchmark: `diagnose` over a large generated multi-rank log, streamed in constant memory. Asserts nothing.

    .venv/bin/python benchmarks/diagnose_throughput.py [--lines 3000000]

Prints lines/s and the peak resident memory after a small and a large log, so constant memory shows as the same
peak for both.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from loadrepro.judge.diagnose import diagnose

NOISE = "[11/30/2026-06:00:{s:02d}] [TRT-LLM] [RANK {r}] [I] iteration {i}: 11 active requests, 640 tokens scheduled\n"
FATAL = ("[11/30/2026-06:00:59] [TRT-LLM] [RANK 0] [E] Draft KV cache context resize failed for request 186: "
         "could not resize to 102991 tokens\n")


def write_log(path: Path, lines: int) -> int:
    with path.open("w") as out:
        for i in range(lines):
            out.write(NOISE.format(s=i % 59, r=i % 4, i=i))
            if i == lines // 2:
                out.write(FATAL)
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=3_000_000)
    big = parser.parse_args().lines
    with tempfile.TemporaryDirectory() as folder:
        for lines in (big // 30, big):
            path = Path(folder) / f"engine-{lines}.log"
            size = write_log(path, lines)
            started = time.perf_counter()
            d = diagnose([path])
            seconds = time.perf_counter() - started
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{lines:>10,} lines ({size / 1e6:,.0f} MB): {seconds:6.2f} s, {d.lines / seconds:,.0f} lines/s, "
                  f"{size / 1e6 / seconds:,.0f} MB/s; peak RSS so far {peak:,.0f} MiB; fatal found: {d.fatal}")


if __name__ == "__main__":
    main()
