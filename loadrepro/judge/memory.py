"""The memory of an engine loadrepro started, as the run read it (load/watch/memory.py): its figures, measured once
(judge/measurements.py), and rule engine_memory_growth: memory that grew steadily with the requests served and did
not come back once the engine was idle (llama.cpp's RSS growing per generated token, a cache never freed).

The warm-up (the first WARM_UP_SHARE of the requests served: weights paged in, pools and caches allocated) is not
growth. From its end, resident memory is fitted against the requests served: a slope per 1,000 requests, and how
well the line explains it. The growth is the last reading, taken once the load ended and the engine was idle, less
the reading at the warm-up's end."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Finding, Severity
from loadrepro.records import MemorySample, RunResult

MIB = 1 << 20
WARM_UP_SHARE = 0.2  # of the requests the run served
STEADY_R = 0.8  # memory follows the requests served at least this closely (Pearson's r) to be growth with them
LEAST_READINGS = 5  # after the warm-up, to fit a line at all
LEAST_SERVED = 50  # after the warm-up, to judge growth with the requests served (a short run's is its warm-up's)
WARN_MB = 64.0  # growth said as a warning when no max_memory_growth_mb is set


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    start_mb: float  # the first reading
    peak_mb: float
    warm_mb: float  # at the warm-up's end
    end_mb: float  # the last reading (after the load)
    anon_end_mb: float | None  # None: not known (read from /metrics)
    swap_peak_mb: float | None
    growth_mb: float  # end less warm
    per_1000_mb: float | None  # the fitted slope per 1,000 requests served (None: too few readings)
    r: float | None  # how closely memory followed the requests served (None: too few readings, or flat)
    readings: int
    served: int
    from_metrics: bool  # the target's /metrics (process_resident_memory_bytes), not the process group loadrepro started


def memory_figures(result: RunResult) -> MemoryFigures | None:
    """None when the run read no memory (a URL target, or reading off)."""
    samples = result.memory
    if not samples:
        return None
    served = samples[-1].served
    warm = next((s for s in samples if s.served >= WARM_UP_SHARE * served), samples[0])
    after = [s for s in samples if s.t_ns >= warm.t_ns]
    slope, r = _fit(after)
    last = samples[-1]
    return MemoryFigures(
        start_mb=_mb(samples[0].rss_bytes), peak_mb=_mb(max(s.rss_bytes for s in samples)), warm_mb=_mb(warm.rss_bytes),
        end_mb=_mb(last.rss_bytes), anon_end_mb=None if last.anon_bytes is None else _mb(last.anon_bytes),
        swap_peak_mb=None if (swap := [s.swap_bytes for s in samples if s.swap_bytes is not None]) == [] else
        _mb(max(swap)), growth_mb=_mb(last.rss_bytes - warm.rss_bytes),
        per_1000_mb=None if slope is None else round(slope * 1000 / MIB, 3), r=r, readings=len(samples),
        served=served, from_metrics=last.processes == 0)


def _fit(samples: list[MemorySample]) -> tuple[float | None, float | None]:
    """Bytes per request served, and Pearson's r, over the readings taken while requests were served."""
    served = np.array([s.served for s in samples], dtype=float)
    rss = np.array([s.rss_bytes for s in samples], dtype=float)
    if len(samples) < LEAST_READINGS or np.ptp(served) == 0:
        return None, None
    slope = float(np.polyfit(served, rss, 1)[0])
    r = float(np.corrcoef(served, rss)[0, 1]) if np.ptp(rss) > 0 else None
    return slope, None if r is None or np.isnan(r) else round(r, 3)


def _mb(value: float) -> float:
    return round(value / MIB, 1)


def memory_growth(result: RunResult, spec: VerdictSpec, figures: MemoryFigures | None) -> Finding | None:
    """The engine's resident memory grew by more than `max_memory_growth_mb` from the warm-up's end to its idle end,
    steadily with the requests it served (r >= 0.8): memory kept per request, which a soak ends with the machine
    killing the engine. Fails the run when `max_memory_growth_mb` is set; else growth over 64 MiB is a warning, since
    a prompt cache kept in RAM (llama.cpp's, on by default) grows so up to its own limit. Swap that grew is said with
    it (growth hidden in swap). Judged over at least 50 requests after the warm-up; not on an engine that died or was
    restarted by a fault (its memory starts again), nor after an interrupt.

    For a target at a URL the readings are the resident memory its /metrics publish (vLLM: its API server's).

    Facts: `growth_mb`, `per_1000_requests_mb`, `r`, `warm_mb`, `end_mb`, `swap_peak_mb` (-1: not published),
    `served`, `source` (proc or metrics)."""
    if figures is None or figures.per_1000_mb is None or figures.r is None or \
            figures.served * (1 - WARM_UP_SHARE) < LEAST_SERVED:
        return None
    limit = spec.max_memory_growth_mb or WARN_MB
    if result.interrupted or result.faults or result.left_service:
        return None
    if figures.growth_mb <= limit or figures.r < STEADY_R:
        return None
    swap = f"; {figures.swap_peak_mb:g} MiB swapped at its peak" if figures.swap_peak_mb else ""
    whose = "the engine's resident memory (process_resident_memory_bytes in its /metrics)" if figures.from_metrics \
        else "the engine's memory"
    return Finding("engine_memory_growth", Severity.FAIL if spec.max_memory_growth_mb else Severity.INFO,
                   f"{whose} grew {figures.growth_mb:g} MiB (from {figures.warm_mb:g} after the warm-up "
                   f"to {figures.end_mb:g} idle after the load), {figures.per_1000_mb:g} MiB per 1,000 requests "
                   f"served, steadily with them (r {figures.r:.2f}){swap}: memory kept per request",
                   {"growth_mb": figures.growth_mb, "per_1000_requests_mb": figures.per_1000_mb, "r": figures.r,
                    "warm_mb": figures.warm_mb, "end_mb": figures.end_mb, "served": figures.served,
                    "swap_peak_mb": -1.0 if figures.swap_peak_mb is None else figures.swap_peak_mb,
                    "source": "metrics" if figures.from_metrics else "proc"})
