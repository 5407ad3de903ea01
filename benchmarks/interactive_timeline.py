"""Benchmark: report.html's timeline drawn by the browser for a soak-sized run: 100,000 requests (each a tick) and
100,000 in-flight steps over an hour, /health and KV every half second. Prints how long building the page takes,
its size, and how long headless Chromium (Debian's) takes to load and draw it (its navigation timing). Asserts
nothing.

    .venv/bin/python benchmarks/interactive_timeline.py [--requests 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadrepro.report.html import html_page  # noqa: E402
from loadrepro.report.interactive import latency_section, page_scripts, timeline_section  # noqa: E402
from loadrepro.report.timeline import Lane, Timeline  # noqa: E402
from tests.browser import CHROMIUM, opened  # noqa: E402


def soak_timeline(n: int, seconds: float = 3600.0) -> Timeline:
    rng = np.random.default_rng(1)
    ends = np.sort(rng.uniform(0, seconds, n))
    lanes = tuple(Lane(i % 500, 1, float(ends[i]) - 1.0, float(ends[i]), "ok" if i % 50 else "stream_error", 0, i)
                  for i in range(n))
    polls = int(seconds * 2)
    at, empty = np.linspace(0, seconds, polls), np.array([])
    return Timeline(label="soak", duration_s=seconds, in_flight_t=ends, in_flight_n=rng.integers(0, 64, n), ends={},
                    end_counts={}, health_t=at, health_ok=np.ones(polls, dtype=int), health_status=("200",) * polls,
                    health_latency_s=rng.uniform(0.001, 0.01, polls), canary_t=empty, canary_ttft_s=empty, kv_t=at,
                    kv_usage=rng.uniform(0, 1, polls), waiting_t=at, waiting=rng.integers(0, 10, polls),
                    running_t=empty, running=empty, lanes=lanes, ttft_ms=empty, e2e_ms=empty, first_failure_s=100.0,
                    first_fatal_s=None, first_fatal_text="")


async def drawn(page: Path) -> tuple[float, int, list[str]]:
    async with opened(page.as_uri()) as tab:
        loaded = await tab.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
        charts = await tab.evaluate("window.loadreproCharts.length")
        return float(loaded), int(charts), list(tab.errors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    args = parser.parse_args()
    started = time.perf_counter()
    timeline = soak_timeline(args.requests)
    page = html_page("timeline", timeline_section(timeline) + latency_section([timeline]) + page_scripts())
    print(f"page built in {time.perf_counter() - started:.2f} s: {len(page) / 1e6:.1f} MB")
    if CHROMIUM is None:
        print("chromium is not installed (apt install chromium): the drawing is not timed")
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "timeline.html"
        path.write_text(page, encoding="utf-8")
        loaded, charts, errors = asyncio.run(drawn(path))
    print(f"chromium: {charts} panels loaded and drawn in {loaded:,.0f} ms; console errors: {errors or 'none'}")


if __name__ == "__main__":
    main()
