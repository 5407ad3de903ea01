"""Benchmark: what checking answers ([verify]) costs. Asserts nothing.

    .venv/bin/python benchmarks/answers_cost.py [--requests 1000] [--concurrency 64] [--rounds 2]

Runs `loadrepro run` against the benchmark stub (benchmarks/stub_engine.py, its own process; 128 output tokens,
with --itl-ms 2 so the load takes long enough to measure) with [verify] off and with outputs = "sample"
(16 references), alternating, and prints per run:
- the client's CPU per request over the load window (the stub's first streamed arrival to the end of the load's
  last request), sampled from /proc every 5 ms: with [verify] on, every chunk carries logprobs and the client
  keeps each answer's first 64 tokens with their logprobs;
- the load window and how long the references took (from the report's note);
and the median over the rounds of the on / off ratio of CPU per request.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from client_overhead import PROFILE, CpuSampler, start_stub  # noqa: E402


def one(url: str, n: int, concurrency: int, work: Path, program: list[str], verify: bool) -> tuple[float, float, float]:
    """(CPU ms per request in the load window, the window in s, references in s)."""
    profile, run_dir = work / "bench.toml", work / f"run-{time.monotonic_ns()}"
    profile.write_text(PROFILE.format(n=n, c=concurrency))
    extra = ["--set", "verify.outputs='sample'"] if verify else []
    httpx.get(f"{url}/stats")  # reset the stub's counters
    process = subprocess.Popen(program + ["run", "--profile", str(profile), "--base-url", url, "--out",
                                          str(run_dir), "--quiet", *extra],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sampler = CpuSampler(process.pid)
    sampler.start()
    _, stderr = process.communicate()
    sampler.join()
    stats = httpx.get(f"{url}/stats").json()
    if process.returncode not in (0, 1):
        sys.exit(f"loadrepro failed: {stderr.decode()[-2000:]}")
    first, load_end = stats["window"][0], stats["ends"][n - 1]
    report = json.loads((run_dir / "report.json").read_text())
    said = next((note for note in report["notes"] if note.startswith("answers:")), "")
    found = re.search(r"in ([\d.]+) s", said)
    cpu = sampler.at(load_end) - sampler.at(first)
    return cpu / n * 1000, load_end - first, float(found.group(1)) if found else 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loadrepro", default=str(Path(sys.executable).with_name("loadrepro")))
    args = parser.parse_args()
    process, url = start_stub(0.0, 2.0, True)
    ratios = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for round_ in range(args.rounds):
                off = one(url, args.requests, args.concurrency, Path(work), args.loadrepro.split(), False)
                on = one(url, args.requests, args.concurrency, Path(work), args.loadrepro.split(), True)
                for name, (cpu, window, refs) in (("verify off", off), ("verify sample", on)):
                    print(f"round {round_ + 1} {name:13} {cpu:5.2f} CPU-ms/request over a {window:5.2f} s load"
                          + (f"; 16 references took {refs:.2f} s" if refs else ""))
                ratios.append(on[0] / off[0])
    finally:
        process.terminate()
        process.wait()
    print(f"median of {len(ratios)} rounds, CPU per request with logprobs kept / without: "
          f"{statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
