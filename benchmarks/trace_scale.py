"""Benchmark: a 1,000,000-row Mooncake trace (sessions of 5 turns, a shared system prefix, 512-token blocks), or
with `--format weka` an agent trace of that many requests (agents of 20 requests and two subagents of 5 each, tool
round trips, 64-token blocks, a trace per line). Prints figures; asserts nothing.

    .venv/bin/python benchmarks/trace_scale.py [--rows 1000000] [--format mooncake|weka] [--window 0] [--seconds 20]

1. `loadrepro trace inspect` of the whole file: seconds and the process's peak RSS.
2. `loadrepro run` replaying it (the whole trace, or a window: `trace_max_requests`, the first requests of the
   file) for `--seconds` against the benchmark stub (benchmarks/stub_engine.py, its own process): seconds from the
   command to the first request (the report's timing), and loadrepro's peak RSS. Rows are held, prompts are not:
   each request's body is made when it is sent.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_trace(path: Path, rows: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    sessions, t, next_block = rows // 5, 0.0, 10
    with path.open("w") as out:
        for s in range(sessions):
            t += rng.expovariate(50.0) * 1000
            blocks = [0, 1]  # the system prompt every session shares
            stamp = t
            for _turn in range(5):
                own = rng.randint(1, 3)
                blocks += range(next_block, next_block + own)
                next_block += own
                out.write(json.dumps({"timestamp": round(stamp), "session_id": s, "input_length": len(blocks) * 512
                                      - rng.randint(0, 511), "output_length": rng.randint(16, 256),
                                      "hash_ids": blocks}) + "\n")
                stamp += rng.uniform(2000, 20000)


def write_weka(path: Path, rows: int, seed: int = 1) -> None:
    """Agents of 20 requests, each spawning two subagents of 5 (30 requests a trace), one trace a line."""
    rng = random.Random(seed)

    def agent(requests: int, start: float, next_id: int) -> tuple[list[dict], int]:
        blocks, t, out = [1, 2, 3, 4], start, []
        for k in range(requests):
            own = rng.randint(2, 12)
            blocks = blocks + list(range(next_id, next_id + own))
            next_id += own
            out.append({"t": round(t, 3), "type": "n", "in": len(blocks) * 64 + rng.randint(0, 63),
                        "out": rng.randint(16, 256), "hash_ids": blocks, "stop": "tool_use",
                        "input_types": ["tool_result" if k else "text"], "think_time": 0.5})
            t += rng.uniform(1, 5)
        return out, next_id

    with path.open("w") as file:
        for a in range(rows // 30):
            requests, next_id = agent(20, 0.0, 100)
            for at in (3, 11):
                sub, next_id = agent(5, requests[at]["t"] + 0.1, next_id)
                requests.insert(at + 1, {"t": requests[at]["t"] + 0.1, "type": "subagent", "agent_id": f"s{at}",
                                         "status": "completed", "requests": sub})
            file.write(json.dumps({"id": f"a{a}", "block_size": 64, "hash_id_scope": "local", "tool_tokens": 128,
                                   "system_tokens": 128, "requests": requests}) + "\n")


_MEASURE = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(done.returncode)")


def measured(*command: str) -> tuple[subprocess.CompletedProcess, float, float]:
    """The command run in a process of its own (with its own children, if any), its seconds and its peak RSS (MiB)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _MEASURE, *command], capture_output=True, text=True)
    peak = int(done.stderr.strip().splitlines()[-1]) / 1024
    return done, time.perf_counter() - started, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--format", choices=("mooncake", "weka"), default="mooncake")
    parser.add_argument("--window", type=int, default=0, help="replay the first N requests (0: the whole trace)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the replay runs (load.duration_s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        started = time.perf_counter()
        (write_weka if args.format == "weka" else write_trace)(trace, args.rows)
        print(f"wrote {args.rows:,} rows ({trace.stat().st_size / 1e6:,.0f} MB) in "
              f"{time.perf_counter() - started:.1f} s")
        done, seconds, peak = measured(sys.executable, "-m", "loadrepro", "trace", "inspect", str(trace), "--json")
        if done.returncode:
            sys.exit(done.stderr)
        stats = json.loads(done.stdout)
        print(f"trace inspect: {seconds:.1f} s, peak RSS {peak:,.0f} MiB; "
              f"{stats['requests']:,} requests, {stats['sessions']:,} sessions, {stats['cacheable_share']:.0%} "
              "cacheable" + (f"; agents {stats['agents']}" if stats.get("agents") else ""))
        stub = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "stub_engine.py"), "--tokens", "16",
                                 "--tokenize"], stdout=subprocess.PIPE, text=True)
        try:
            url = stub.stdout.readline().strip()
            out = Path(tmp) / "run"
            done, seconds, peak = measured(
                sys.executable, "-m", "loadrepro", "run", "--profile", "trace-example", "--base-url", url, "--out",
                str(out), "--quiet", "--set", "model='stub'", "--set", f"workload.trace='{trace}'", "--set",
                f"workload.trace_max_requests={args.window}", "--set", "workload.trace_speed=20.0", "--set",
                f"workload.trace_block_tokens={0 if args.format == 'weka' else 512}", "--set",
                f"load.duration_s={args.seconds}", "--set",
                "workload.max_tokens=16", "--set", "watch.metrics_path=''", "--set", "load.concurrency=64")
            if not (out / "report.json").exists():
                sys.exit(done.stderr[-2000:])
            report = json.loads((out / "report.json").read_text())
            timing = report.get("timing") or {}
            what = f"the first {args.window:,} requests" if args.window else f"all {args.rows:,} rows"
            print(f"replay of {what} for {args.seconds:g} s: exit {done.returncode} in {seconds:.0f} s, "
                  f"{timing.get('to_first_request_s', float('nan')):.1f} s from the command to the first request, "
                  f"{report['requests']['total']:,} requests sent, loadrepro's peak RSS {peak:,.0f} MiB")
        finally:
            stub.terminate()
            stub.wait()


if __name__ == "__main__":
    main()
