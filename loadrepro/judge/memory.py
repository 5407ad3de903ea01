"""The memory of an engine loadrepro started, as the run read it (load/watch/memory.py): its figures, measured once
(judge/measurements.py), and rule engine_memory_growth: memory that grew steadily with the requests served and did
not come back once the engine was idle (llama.cpp's RSS growing per generated token, a cache never freed).

The warm-up (the first WARM_UP_SHARE of the requests served: weights paged in, pools and caches allocated) is not
growth. From its end, resident memory is fitted against the requests served: a slope per 1,000 requests, and how
well the line explains it. The growth is the last reading, taken once the load ended and the engine was idle, less
the reading at the warm-up's end. A run read too few times after its warm-up, or that served too few requests
after it, is not judged, and its figures say why (`not_judged`)."""

from __future__ import annotations

import re
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
PLATEAU_SHARE = 0.1  # the last third of the requests grew memory at most this share of the whole rate: it levelled off
LLAMACPP_CACHE_RAM_MB = 8192.0  # llama-server's --cache-ram default (recent releases; -1 none, 0 off)
_CACHE_RAM = re.compile(r"(?:^|\s)(?:--cache-ram|-cram)[\s=]+(-?\d+)")


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
    not_judged: str | None = None  # why rule engine_memory_growth could not judge it (None: it was judged)
    plateaued: bool = False  # the growth levelled off over the last third of the requests: bounded, not a leak
    cache_cap_mb: float | None = None  # a prompt cache in RAM the engine keeps by design, up to this (llama.cpp's)


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
    after_warm_up = served - warm.served
    return MemoryFigures(
        start_mb=_mb(samples[0].rss_bytes), peak_mb=_mb(max(s.rss_bytes for s in samples)), warm_mb=_mb(warm.rss_bytes),
        end_mb=_mb(last.rss_bytes), anon_end_mb=None if last.anon_bytes is None else _mb(last.anon_bytes),
        swap_peak_mb=None if (swap := [s.swap_bytes for s in samples if s.swap_bytes is not None]) == [] else
        _mb(max(swap)), growth_mb=_mb(last.rss_bytes - warm.rss_bytes),
        per_1000_mb=None if slope is None else round(slope * 1000 / MIB, 3), r=r, readings=len(samples),
        served=served, from_metrics=last.processes == 0,
        not_judged=_not_judged(result, len(samples), len(after), after_warm_up),
        plateaued=_plateaued(after, slope), cache_cap_mb=cache_cap_mb(result.engine_cmd))


def _plateaued(after: list[MemorySample], slope: float | None) -> bool:
    """Whether memory that grew with the requests stopped growing over the last third of those served after the
    warm-up (a pool or a cache that filled up to its size): at most PLATEAU_SHARE of the whole rate there."""
    if slope is None or slope <= 0 or not after:
        return False
    first, last = after[0].served, after[-1].served
    tail = [s for s in after if s.served >= first + (last - first) * 2 / 3]
    tail_slope, _ = _fit(tail, least=3)
    return tail_slope is not None and tail_slope <= PLATEAU_SHARE * slope


def cache_cap_mb(engine_cmd: str | None) -> float | None:
    """The cap of the prompt cache llama.cpp's server keeps in host RAM, read from the command loadrepro started it
    with: `--cache-ram N` (MiB; 0 off, -1 no cap), else its default where the command names llama-server or
    loadrepro's llama.cpp recipe. None: no such cache known (another engine, a target at a URL, a cache without cap)."""
    if not engine_cmd:
        return None
    flag = _CACHE_RAM.search(engine_cmd)
    if flag is not None:
        value = float(flag.group(1))
        return value if value > 0 else None
    return LLAMACPP_CACHE_RAM_MB if re.search(r"llama-server|serve-llamacpp", engine_cmd) else None


def _not_judged(result: RunResult, readings: int, after: int, served: int) -> str | None:
    """Why the growth cannot be judged, in words that follow "not judged: " (None: it can)."""
    if after < LEAST_READINGS:
        return f"{readings} readings ({after} from the warm-up's end on, at least {LEAST_READINGS} needed)"
    if served < LEAST_SERVED:
        return f"{served} requests served after the warm-up (at least {LEAST_SERVED} needed)"
    if result.interrupted:
        return "the run was interrupted"
    if result.faults:
        return "faults on purpose stopped or disturbed the engine"
    if result.left_service:
        return "the engine left service during the run"
    return None


def _fit(samples: list[MemorySample], least: int = LEAST_READINGS) -> tuple[float | None, float | None]:
    """Bytes per request served, and Pearson's r, over the readings taken while requests were served."""
    served = np.array([s.served for s in samples], dtype=float)
    rss = np.array([s.rss_bytes for s in samples], dtype=float)
    if len(samples) < least or np.ptp(served) == 0:
        return None, None
    slope = float(np.polyfit(served, rss, 1)[0])
    r = float(np.corrcoef(served, rss)[0, 1]) if np.ptp(rss) > 0 else None
    return slope, None if r is None or np.isnan(r) else round(r, 3)


def _mb(value: float) -> float:
    return round(value / MIB, 1)


def memory_growth(result: RunResult, spec: VerdictSpec, figures: MemoryFigures | None) -> Finding | None:
    """The engine's resident memory grew by more than `max_memory_growth_mb` from the warm-up's end to its idle end,
    steadily with the requests it served (r >= 0.8) and still growing over the last third of them: memory kept per
    request, which a soak ends with the machine killing the engine. Fails the run when `max_memory_growth_mb` is set;
    else growth over 64 MiB is a warning. Growth that levelled off (the last third's rate at most a tenth of the whole)
    is bounded, not a leak. Growth within a prompt cache in RAM the engine keeps by design up to a known cap
    (llama.cpp's --cache-ram, read from the engine command: 8192 MiB by default) is said as information, not a leak;
    beyond that cap it is judged as any growth. Swap that grew is said with it (growth hidden in swap). Judged over at
    least 50 requests and 5 readings after the warm-up (memory is read at request milestones as well as on the
    clock, so that a short run is read often enough); not on an engine that died or was restarted by a fault (its
    memory starts again), nor after an interrupt: report.json engine_memory.not_judged says why.

    For a target at a URL the readings are the resident memory its /metrics publish (vLLM: its API server's).

    Facts: `growth_mb`, `per_1000_requests_mb`, `r`, `warm_mb`, `end_mb`, `swap_peak_mb` (-1: not published),
    `served`, `source` (proc or metrics), `cache_cap_mb` (the prompt cache's cap allowed for; -1: none known)."""
    if figures is None or figures.not_judged is not None or figures.per_1000_mb is None or figures.r is None:
        return None
    limit = spec.max_memory_growth_mb or WARN_MB
    if figures.growth_mb <= limit or figures.r < STEADY_R or figures.plateaued:
        return None
    cap = figures.cache_cap_mb
    if cap is not None and figures.growth_mb <= cap:
        return Finding("engine_memory_growth", Severity.INFO,
                       f"the engine's memory grew {figures.growth_mb:g} MiB (from {figures.warm_mb:g} after the "
                       f"warm-up to {figures.end_mb:g} idle after the load), steadily with the requests served (r "
                       f"{figures.r:.2f}), within the {cap:g} MiB its prompt cache in RAM may keep by design "
                       "(llama.cpp's --cache-ram): not judged a leak; --cache-ram 0 judges the engine's own memory",
                       _facts(figures))
    swap = f"; {figures.swap_peak_mb:g} MiB swapped at its peak" if figures.swap_peak_mb else ""
    whose = "the engine's resident memory (process_resident_memory_bytes in its /metrics)" if figures.from_metrics \
        else "the engine's memory"
    return Finding("engine_memory_growth", Severity.FAIL if spec.max_memory_growth_mb else Severity.INFO,
                   f"{whose} grew {figures.growth_mb:g} MiB (from {figures.warm_mb:g} after the warm-up "
                   f"to {figures.end_mb:g} idle after the load), {figures.per_1000_mb:g} MiB per 1,000 requests "
                   f"served, steadily with them (r {figures.r:.2f}){swap}: memory kept per request" +
                   (f", beyond the {cap:g} MiB its prompt cache in RAM may keep" if cap is not None else ""),
                   _facts(figures))


def _facts(figures: MemoryFigures) -> dict[str, int | float | str]:
    assert figures.per_1000_mb is not None and figures.r is not None  # judged: the line was fitted
    return {"growth_mb": figures.growth_mb, "per_1000_requests_mb": figures.per_1000_mb, "r": figures.r,
            "warm_mb": figures.warm_mb, "end_mb": figures.end_mb, "served": figures.served,
            "swap_peak_mb": -1.0 if figures.swap_peak_mb is None else figures.swap_peak_mb,
            "source": "metrics" if figures.from_metrics else "proc",
            "cache_cap_mb": -1.0 if figures.cache_cap_mb is None else figures.cache_cap_mb}
