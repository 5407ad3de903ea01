"""A soak against the benchmark stub: loadrepro's RSS over time, the final reports' sizes and how long the final
judging and writing took. The issue's target: RSS at minute 10 within +10% of minute 2 at >= 500 requests/s;
reports <= 5 MB each, written in < 5 s.

    python benchmarks/soak.py --minutes 10 --concurrency 32 --tokens 16
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    stub = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "stub_engine.py"), "--tokens",
                             str(args.tokens)], stdout=subprocess.PIPE, text=True)
    try:
        url = stub.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            duration = args.minutes * 60
            run = subprocess.Popen(
                [sys.executable, "-m", "loadrepro", "run", "--base-url", url, "--out", str(out), "--quiet",
                 "--set", "model='stub'", "--set", f"load.duration_s={duration}", "--set",
                 f"load.concurrency={args.concurrency}", "--set", "workload.prefix_tokens=200", "--set",
                 "workload.turn_tokens=50", "--set", f"workload.max_tokens={args.tokens}", "--set",
                 "watch.metrics_path=''"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            started, samples = time.monotonic(), []
            while run.poll() is None:
                samples.append((time.monotonic() - started, rss_mib(run.pid)))
                time.sleep(5)
            ended = time.monotonic()
            if not (out / "report.json").exists():
                sys.exit(f"the run left no report (exit {run.returncode}): {run.stderr.read()[-2000:]}")
            _summary(out, samples, started, ended, duration, run.returncode)
    finally:
        stub.terminate()
        stub.wait()


def _summary(out: Path, samples: list[tuple[float, float]], started: float, ended: float, duration: float,
             code: int) -> None:
    report = json.loads((out / "report.json").read_text())
    total = report["requests"]["total"]
    at = {m: next((r for t, r in samples if t >= m * 60), samples[-1][1]) for m in (2, int(duration // 60))}
    print(f"exit {code}; {total:,} requests in {report['duration_s']:.0f} s = {total / report['duration_s']:,.0f}/s")
    for minute, rss in at.items():
        print(f"RSS at minute {minute}: {rss:,.0f} MiB")
    print(f"RSS growth from minute 2: {at[max(at)] / at[2] - 1:+.0%}")
    for name in ("report.json", "report.html", "report.md", "requests.jsonl"):
        print(f"{name}: {(out / name).stat().st_size / 1e6:,.1f} MB")
    load_end = report["duration_s"]
    print(f"after the load: {ended - started - load_end:,.1f} s to judge, write and exit (incl. start-up and "
          "planning before the load)")


if __name__ == "__main__":
    main()
