"""Benchmark: `loadrepro run --workers 1` against `--workers 2` at high concurrency, in one invocation. Asserts
nothing.

    .venv/bin/python benchmarks/workers.py [--requests 4096] [--concurrency 1024] [--rounds 2]

Against the sleeping stub (benchmarks/stub_engine.py, its own process: 200 ms TTFT, 10 ms ITL, /tokenize), prints
per run: the whole run's CPU per request, summed over the driver and its workers (wait4 counts the workers the
driver reaped); requests/s and the stub's average in flight (Little's law: the concurrency when every slot is
kept busy); TTFT error against what the stub produced (mean, p50, the first wave of `concurrency` requests, the
rest) and ITL error (mean gap seen by the client against the stub's mean gap).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from client_overhead import Outcome, run_loadrepro, start_stub, ttft_errors


def loadrepro(url: str, n: int, c: int, workers: int, work: Path, program: list[str]) -> tuple[Outcome, float]:
    """A run with `workers` workers, and the mean gap between chunks its client saw (ms)."""
    outcome, records = run_loadrepro(url, n, c, work, program, ["--workers", str(workers)], f"{workers} worker(s)")
    gaps = [(b - a) / 1e6 for r in records for a, b in zip(r["chunk_ns"], r["chunk_ns"][1:])]
    return outcome, statistics.mean(gaps)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=4096)
    parser.add_argument("--concurrency", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loadrepro", default=str(Path(sys.executable).with_name("loadrepro")))
    args = parser.parse_args()
    n, c = args.requests, args.concurrency
    process, url = start_stub(200.0, 10.0, True)
    try:
        print(f"stub: 128 tokens, TTFT 200 ms, ITL 10 ms, /tokenize; {n} requests at concurrency {c}")
        with tempfile.TemporaryDirectory() as work:
            for _ in range(args.rounds):
                for workers in (1, 2):
                    o, itl_ms = loadrepro(url, n, c, workers, Path(work), shlex.split(args.loadrepro))
                    errors = ttft_errors(o, c)
                    print(f"  {o.name:12} whole run {o.whole_cpu_s / n * 1000:5.2f} CPU-ms/req  "
                          f"{n / o.window_s:6.0f} req/s  stub in flight {o.in_flight:7.1f} ({o.in_flight / c:.0%})  "
                          f"TTFT error (ms) " + ", ".join(f"{k} {v:+6.1f}" for k, v in errors.items())
                          + f"; ITL error {itl_ms - o.stub_itl_ms:+.2f} ms ({itl_ms:.2f} against the stub's "
                          f"{o.stub_itl_ms:.2f})")
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    main()
