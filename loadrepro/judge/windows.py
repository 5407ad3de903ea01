"""A long run cut into fixed windows (`[verdict] window_s`), and saturation found in them (arrivals outpacing a
steady service, the queue growing window after window). The rules that read them are in judge/soak.py. Pure.

A request belongs to the window it was sent in. Only whole windows count: a last window shorter than half of
`window_s` is dropped. The first window holds the ramp-up, so the first steady window is the second.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from ddsketch import DDSketch

from loadrepro.judge.findings import FAILED
from loadrepro.records import (
    Outcome,
    RunResult,
    WindowTally,
)

REFERENCE_WINDOW = 1  # the degradation rule's reference: the first steady window (the first holds the ramp-up)
TTFT_FLOOR_MS = 50.0  # TTFT growth below this is noise on a busy machine, whatever the ratio
MIN_SAMPLES = 5  # a window with fewer first tokens says nothing about its TTFT
CONFIDENCE = 0.95  # of a window's TTFT p95 interval, which the degradation rule compares
SATURATED_WINDOWS = 3  # the queue grew through this many windows in a row, to the last
STEADY_SERVICE = 0.8  # saturation, not degradation: completions per window keep at least this share of their best


@dataclass(frozen=True, slots=True)
class Window:
    index: int  # 1-based, as reports name them
    start_s: float
    end_s: float
    requests: int
    outcomes: dict[str, int] = field(default_factory=dict)
    failed: int = 0
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    ttft_p95_bounds_ms: tuple[float, float] | None = None  # where its TTFT p95 lies, with CONFIDENCE
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    kv_usage_max: float | None = None
    kv_usage_quiet: float | None = None  # the lowest KV usage while nothing ran or waited
    waiting_max: float | None = None
    preemptions: float | None = None  # the engine's counter's growth in the window
    memory_mb: float | None = None  # the engine's resident memory at its last reading in the window
    ended: int = 0  # requests that ended in the window (sent in it or before)
    due: int = 0  # requests loadrepro wanted to send in the window: its arrivals, sent then or later
    in_flight_end: int = 0  # requests loadrepro had in flight when the window ended
    unsent_end: int = 0  # requests due that were still waiting in loadrepro to be sent (its concurrency full)
    slo_attainment: float | None = None  # [slo]: the share of its judged requests that met it (None: none judged)

    @property
    def backlog(self) -> int:
        """Requests due and not yet ended at the window's end: in flight, or waiting in loadrepro to be sent."""
        return self.in_flight_end + self.unsent_end

    @property
    def error_rate(self) -> float:
        return self.failed / self.requests if self.requests else 0.0

    @property
    def span(self) -> str:
        return f"window {self.index} ({self.start_s:g}-{self.end_s:g} s)"


def windows(result: RunResult, window_s: float) -> list[Window]:
    """The run's whole windows (none when the run is shorter than two of them), from the run's tally: the same
    numbers whether or not every record was kept in memory."""
    tally = result.totals(window_s)
    window_s = tally.window_s  # a tally of a long run keeps the windows it was counted in
    duration = result.seconds(result.end_ns)
    if window_s <= 0:
        return []
    count = int(duration // window_s) + (1 if duration % window_s >= window_s / 2 else 0)
    if count < 2:
        return []
    found = [_window(i, window_s, tally.windows.get(i, WindowTally())) for i in range(count)]
    in_flight = unsent = 0
    for i, w in enumerate(found):  # what loadrepro had in flight, and waiting to send, at each window's end
        t = tally.windows.get(i, WindowTally())
        in_flight += t.sent - t.ended
        unsent += t.due - t.sent - t.dropped
        slo = tally.slo_counts.between(int(w.start_s), int(w.end_s)) if tally.slo.limits else None
        found[i] = dataclasses.replace(w, ended=t.ended, due=t.due, in_flight_end=in_flight, unsent_end=unsent,
                                       slo_attainment=slo.met / slo.requests if slo and slo.requests else None)
    return found


def _quantile(sketch: DDSketch, q: float) -> float | None:
    value = sketch.get_quantile_value(q)  # None only when the sketch is empty
    return round(float(value), 3) if value is not None else None


def quantile_bounds(sketch: DDSketch, q: float) -> tuple[float, float] | None:
    """The interval in which the q-th quantile of what the sketch's samples were drawn from lies with CONFIDENCE,
    whatever their distribution: how many samples fall below that quantile is binomial (n, q), so the values at
    the ranks that count's tails bound are the interval's ends. Fewer than 72 samples cannot bound a p95 from
    above (their largest is below it more than 2.5% of the time): the upper end is then their largest, a bound
    that holds less often. On a few dozen samples one window's p95 is a noisy figure."""
    from scipy import special  # here, not at import (0.2 s): only runs of several windows need it

    n = int(sketch.count)
    if n == 0:
        return None
    tail = (1 - CONFIDENCE) / 2
    below = special.bdtr(np.arange(n + 1), n, q)  # P(at most k samples below the quantile), k = 0..n
    low = max(int(np.searchsorted(below, tail)), 1)  # 1-based ranks
    high = min(int(np.searchsorted(below, 1 - tail)) + 1, n)
    return _at_rank(sketch, low), _at_rank(sketch, high)


def _at_rank(sketch: DDSketch, rank: int) -> float:
    """The sketch's k-th smallest value (1-based): the sketch reads a rank r as the first bucket holding more than
    r samples, so half a rank more keeps a rounding error from reading the one before."""
    count = sketch.count
    value = _quantile(sketch, min((rank - 0.5) / (count - 1), 1.0) if count > 1 else 0.0)
    assert value is not None  # a rank of a sketch that holds it
    return value


def _window(i: int, window_s: float, t: WindowTally) -> Window:
    failed = sum(n for outcome, n in t.outcomes.items() if Outcome(outcome) in FAILED)
    preempted = t.preemptions_high - t.preemptions_low if t.preemptions_high is not None and \
        t.preemptions_low is not None else None
    return Window(index=i + 1, start_s=i * window_s, end_s=(i + 1) * window_s, requests=t.requests,
                  outcomes=dict(t.outcomes), failed=failed, ttft_p50_ms=_quantile(t.ttft_ms, 0.5),
                  ttft_p95_ms=_quantile(t.ttft_ms, 0.95), ttft_p95_bounds_ms=quantile_bounds(t.ttft_ms, 0.95),
                  itl_p50_ms=_quantile(t.itl_ms, 0.5),
                  itl_p95_ms=_quantile(t.itl_ms, 0.95), kv_usage_max=t.kv_usage_max,
                  kv_usage_quiet=t.kv_usage_quiet, waiting_max=t.waiting_max, preemptions=preempted,
                  memory_mb=t.memory_mb)


@dataclass(frozen=True, slots=True)
class Saturation:
    windows: tuple[Window, ...]  # from the window it began to the last

    @property
    def first(self) -> Window:
        return self.windows[0]

    @property
    def last(self) -> Window:
        return self.windows[-1]


def load_windows(result: RunResult, found: list[Window]) -> list[Window]:
    """Of the run's windows, those while requests were being started: those that ended before the run's stop (the
    drain after a stop says nothing of arrivals against service)."""
    if result.stopped_ns is None:
        return found
    return [w for w in found if w.end_s <= result.seconds(result.stopped_ns) + 1e-9]


def saturation(found: list[Window]) -> Saturation | None:
    """Arrivals outpacing a steady service: from some window to the last (SATURATED_WINDOWS at least), the
    requests due and not yet ended at each window's end (in flight, or waiting in loadrepro for a slot of its
    concurrency) stayed above where they began and grew by more than a window's worth of completions (and at least
    one a window), nothing failed, the requests completed in the last window kept STEADY_SERVICE of the most any of
    them completed (an engine that slows down is degrading, not saturated), and the engine's waiting count, when it
    publishes one, grew too, unless the queue that grew is loadrepro's own (its concurrency caps what the engine
    sees). A closed loop, whose requests are sent as others end, does not saturate."""
    steady = found[REFERENCE_WINDOW:]
    for start in range(len(steady) - SATURATED_WINDOWS + 1):
        run = steady[start:]
        base, most = run[0].backlog, max(w.ended for w in run)
        # Grown past noise: by more than a window's worth of completions, and at least one a window.
        grown = run[-1].backlog - base >= max(len(run) - 1, most)
        if grown and all(w.backlog > base for w in run[1:]):
            break
    else:
        return None
    if any(w.failed for w in run) or run[-1].ended < STEADY_SERVICE * most:
        return None
    first_waiting, last_waiting = run[0].waiting_max, run[-1].waiting_max
    published = all(w.waiting_max is not None for w in run)
    if run[-1].unsent_end > run[0].unsent_end:
        return Saturation(tuple(run))  # the queue is loadrepro's: the engine sees no more than its concurrency
    if published and first_waiting is not None and last_waiting is not None and last_waiting <= first_waiting:
        return None  # the engine says nothing waits more: what loadrepro holds is in the network, or streaming
    return Saturation(tuple(run))
