"""A long run cut into fixed windows (`[verdict] window_s`), and the rules that only a long run can break:
degradation (TTFT or errors growing from the first steady window to the last), a KV leak (KV usage at quiet
moments creeping up), and errors that come back after a recovery. Pure.

A request belongs to the window it was sent in. Only whole windows count: a last window shorter than half of
`window_s` is dropped. The first window holds the ramp-up, so the first steady window is the second.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddsketch import DDSketch

from loadrepro.judge.findings import FAILED, Finding, Severity
from loadrepro.profile import VerdictSpec
from loadrepro.records import (
    Outcome,
    RunResult,
    WindowTally,
)

REFERENCE_WINDOW = 1  # the degradation rule's reference: the first steady window (the first holds the ramp-up)
TTFT_FLOOR_MS = 50.0  # TTFT growth below this is noise on a busy machine, whatever the ratio
MIN_SAMPLES = 5  # a window with fewer first tokens says nothing about its TTFT


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
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    kv_usage_max: float | None = None
    kv_usage_quiet: float | None = None  # the lowest KV usage while nothing ran or waited
    waiting_max: float | None = None
    preemptions: float | None = None  # the engine's counter's growth in the window

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
    return [_window(i, window_s, tally.windows.get(i, WindowTally())) for i in range(count)]


def _quantile(sketch: DDSketch, q: float) -> float | None:
    value = sketch.get_quantile_value(q)  # None only when the sketch is empty
    return round(float(value), 3) if value is not None else None


def _window(i: int, window_s: float, t: WindowTally) -> Window:
    failed = sum(n for outcome, n in t.outcomes.items() if Outcome(outcome) in FAILED)
    preempted = t.preemptions_high - t.preemptions_low if t.preemptions_high is not None and \
        t.preemptions_low is not None else None
    return Window(index=i + 1, start_s=i * window_s, end_s=(i + 1) * window_s, requests=t.requests,
                  outcomes=dict(t.outcomes), failed=failed, ttft_p50_ms=_quantile(t.ttft_ms, 0.5),
                  ttft_p95_ms=_quantile(t.ttft_ms, 0.95), itl_p50_ms=_quantile(t.itl_ms, 0.5),
                  itl_p95_ms=_quantile(t.itl_ms, 0.95), kv_usage_max=t.kv_usage_max,
                  kv_usage_quiet=t.kv_usage_quiet, waiting_max=t.waiting_max, preemptions=preempted)


# -- rules ----------------------------------------------------------------------------------------------------


def degradation(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """The last window against the first steady one: TTFT p95 grown by more than `max_ttft_growth` (and by more
    than TTFT_FLOOR_MS), or the error rate up by more than `max_error_growth`. Needs three windows."""
    found = windows(result, spec.window_s)
    if len(found) < 3:
        return None
    first, last = found[REFERENCE_WINDOW], found[-1]
    parts = []
    if _enough(first) and _enough(last) and first.ttft_p95_ms is not None and last.ttft_p95_ms is not None:
        grown = last.ttft_p95_ms - first.ttft_p95_ms
        if grown > TTFT_FLOOR_MS and last.ttft_p95_ms > first.ttft_p95_ms * (1 + spec.max_ttft_growth):
            parts.append(f"TTFT p95 grew from {first.ttft_p95_ms:,.0f} ms in {first.span} to "
                         f"{last.ttft_p95_ms:,.0f} ms in {last.span} (at most +{spec.max_ttft_growth:.0%} allowed)")
    if first.requests and last.requests and last.error_rate - first.error_rate > spec.max_error_growth:
        parts.append(f"the error rate grew from {first.error_rate:.1%} in {first.span} to {last.error_rate:.1%} in "
                     f"{last.span} (at most +{spec.max_error_growth:.0%} allowed)")
    return Finding("degradation", Severity.FAIL, "; ".join(parts)) if parts else None


def _enough(w: Window) -> bool:
    return sum(n for o, n in w.outcomes.items() if o == Outcome.OK.value) >= MIN_SAMPLES


def kv_leak(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """KV usage at quiet moments (nothing running or waiting) creeping up window after window by more than
    `max_kv_leak` in all: blocks the engine never frees. Needs quiet moments in three windows."""
    quiet = [(w, w.kv_usage_quiet) for w in windows(result, spec.window_s) if w.kv_usage_quiet is not None]
    if len(quiet) < 3:
        return None
    steps = [b - a for (_, a), (_, b) in zip(quiet, quiet[1:])]
    rise = quiet[-1][1] - quiet[0][1]
    if rise <= spec.max_kv_leak or min(steps) < -spec.max_kv_leak / 10:
        return None
    (first, low), (last, high) = quiet[0], quiet[-1]
    return Finding("kv_leak", Severity.FAIL, f"KV usage with nothing running crept up from {low:.1%} in {first.span} "
                   f"to {high:.1%} in {last.span}, window after window: blocks the engine never frees")


def errors_after_recovery(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Failures, then a window with completed requests and none failed (a recovery), then failures again."""
    failing: Window | None = None
    recovered: Window | None = None
    for w in windows(result, spec.window_s):
        if w.failed and recovered is not None and failing is not None:
            return Finding("errors_after_recovery", Severity.FAIL,
                           f"errors came back in {w.span} ({w.failed} of {w.requests} requests failed) after the "
                           f"engine had recovered in {recovered.span}, following failures in {failing.span}")
        if w.failed:
            failing = w
        elif failing is not None and w.outcomes.get(Outcome.OK.value):
            recovered = w
    return None


SOAK_RULES = (degradation, kv_leak, errors_after_recovery)
