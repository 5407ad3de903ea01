"""Benchmark: building and writing every report of a synthetic run (JSON, Markdown, JUnit, HTML with SVG
pictures, two PNGs). Prints seconds; asserts nothing.

    .venv/bin/python benchmarks/report_write.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from loadrepro.config.profile_files import load_profile
from loadrepro.judge.judgement import judge
from loadrepro.records import HealthSample, MetricsSample, Outcome, RequestRecord, RunResult
from loadrepro.report.build import build_report
from loadrepro.report.timeline import timeline_of
from loadrepro.report.write import write_reports
from loadrepro.workload.summary import WorkloadSummary

S = 1_000_000_000


def synthetic(n: int, seed: int = 1) -> RunResult:
    rng = np.random.default_rng(seed)
    duration = max(60, n // 20)
    choices = [Outcome.OK, Outcome.OK, Outcome.OK, Outcome.REJECTED, Outcome.STREAM_ERROR]
    outcomes = [choices[k] for k in rng.integers(0, len(choices), n)]
    records = []
    for i in range(n):
        sent = int(rng.uniform(0, duration - 10) * S)
        first = sent + int(rng.uniform(0.05, 2) * S)
        chunks = tuple(first + k * 20_000_000 for k in range(64)) if outcomes[i] is Outcome.OK else ()
        records.append(RequestRecord(i + 1, i // 4, i % 4 + 1, outcomes[i], "" if outcomes[i] is Outcome.OK else
                                     "Failed to resume draft KV cache for request 3", 200, 0.0, sent - 1000, sent,
                                     sent + 1000, first if chunks else None, first + 70 * 20_000_000, chunks,
                                     "length" if chunks else None, 4000, 64 if chunks else None, 2000, 4000, 2000, 64))
    health = tuple(HealthSample(t * S, 200 if t < duration * 0.8 else 503, 1000) for t in range(duration))
    metrics = tuple(MetricsSample(t * S // 2, {"vllm:kv_cache_usage_perc": min(1.0, t / duration),
                                               "vllm:num_requests_waiting": float(t % 7)}) for t in range(2 * duration))
    return RunResult("stock", "http://127.0.0.1:8000", "m", None, 7, "2026-11-30T00:00:00+00:00", 0, duration * S,
                     tuple(records), health, health[-1], metrics, (), (), (), "done", False)


def main() -> None:
    profile = load_profile("quickstart")
    summary = WorkloadSummary("conversations", "chat", 7, "x", "x", 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, ())
    for n in (1_000, 10_000):
        result = synthetic(n)
        with tempfile.TemporaryDirectory() as out:
            started = time.perf_counter()
            report = build_report(result, profile, judge(result, profile.verdict), summary, "loadrepro run")
            built = time.perf_counter()
            written = write_reports(report, Path(out), timeline_of(result))
            done = time.perf_counter()
            size = sum(p.stat().st_size for p in written)
        print(f"{n:>6} requests: classify + build {built - started:5.2f} s, write all reports {done - built:5.2f} s, "
              f"total {done - started:5.2f} s ({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
