"""A long run cut into fixed windows (`[verdict] window_s`), and the rules that only a long run can break:
degradation (TTFT or errors growing from the first steady window to the last), a KV leak (KV usage at quiet
moments creeping up), and errors that come back after a recovery; and what is not a failure but looks like one,
saturation (arrivals outpacing a steady service, the queue growing window after window). Pure.

A request belongs to the window it was sent in. Only whole windows count: a last window shorter than half of
`window_s` is dropped. The first window holds the ramp-up, so the first steady window is the second.
"""

from __future__ import annotations

import dataclasses
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
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    kv_usage_max: float | None = None
    kv_usage_quiet: float | None = None  # the lowest KV usage while nothing ran or waited
    waiting_max: float | None = None
    preemptions: float | None = None  # the engine's counter's growth in the window
    ended: int = 0  # requests that ended in the window (sent in it or before)
    due: int = 0  # requests loadrepro wanted to send in the window: its arrivals, sent then or later
    in_flight_end: int = 0  # requests loadrepro had in flight when the window ended
    unsent_end: int = 0  # requests due that were still waiting in loadrepro to be sent (its concurrency full)

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
        found[i] = dataclasses.replace(w, ended=t.ended, due=t.due, in_flight_end=in_flight, unsent_end=unsent)
    return found


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


@dataclass(frozen=True, slots=True)
class Saturation:
    windows: tuple[Window, ...]  # from the window it began to the last

    @property
    def first(self) -> Window:
        return self.windows[0]

    @property
    def last(self) -> Window:
        return self.windows[-1]


def load_windows(result: RunResult, window_s: float) -> list[Window]:
    """The windows while requests were being started: those that ended before the run's stop (the drain after a
    stop says nothing of arrivals against service)."""
    found = windows(result, window_s)
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


def _grew(name: str, values: list[float | None], unit: str = "") -> str:
    known = [v for v in values if v is not None]
    moved = len(known) >= 2 and round(known[0]) != round(known[-1])
    return f"; {name} from {known[0]:,.0f} to {known[-1]:,.0f}{unit}" if moved else ""


def _unsent(result: RunResult, spec: VerdictSpec, run: list[Window]) -> str:
    """The queue in loadrepro itself, when it grew: requests due that waited for a slot of its concurrency."""
    if run[-1].unsent_end <= run[0].unsent_end:
        return ""
    waited = result.totals(spec.window_s).queue_ms  # every sent request's wait for its slot
    median, longest = waited.get_quantile_value(0.5), waited.get_quantile_value(1.0)
    return (f", and requests due but waiting in loadrepro to be sent (its concurrency full) from "
            f"{run[0].unsent_end:,} to {run[-1].unsent_end:,}"
            + (f" (a sent request waited up to {longest / 1e3:,.1f} s for a slot, median {median / 1e3:,.1f} s)"
               if longest is not None and median is not None else ""))


def saturated(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Information, not a failure: arrivals outpaced the engine's steady service (see `saturation`), so requests
    queued and waited longer window after window while nothing failed. Says when it began, at what rates, and how
    the queue, the engine's waiting count and TTFT grew. With [load] stop_when_saturated the load ends there."""
    found = saturation(load_windows(result, spec.window_s))
    if found is None:
        return None
    first, last, run = found.first, found.last, list(found.windows)
    window_s = first.end_s - first.start_s
    return Finding("saturated", Severity.INFO,
                   f"saturated from {first.span}: requests arrived at {first.due / window_s:,.2f}/s and "
                   f"completed at {first.ended / window_s:,.2f}/s; requests in flight grew from "
                   f"{first.in_flight_end:,} to {last.in_flight_end:,} over {len(run)} windows"
                   + _unsent(result, spec, run)
                   + _grew("the engine's waiting requests", [w.waiting_max for w in run])
                   + _grew("TTFT p95", [w.ttft_p95_ms for w in run], " ms")
                   + ", with nothing failing: the engine is at capacity, not broken")


def degradation(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """The last window against the first steady one: TTFT p95 grown by more than `max_ttft_growth` (and by more
    than TTFT_FLOOR_MS), or the error rate up by more than `max_error_growth`. Needs three windows. TTFT grown by
    saturation (a queue growing under a steady service, rule `saturated`) is not degradation; nor is a fault on
    purpose's: windows that overlap one, from when it was caused until /health 200 again, are neither compared
    nor compared with (the engine's way back is no_recovery's to judge)."""
    found = windows(result, spec.window_s)
    if len(found) < 3:
        return None
    faults = result.fault_spans
    calm = [w for w in found[REFERENCE_WINDOW:] if not faults.overlaps(
        result.start_ns + int(w.start_s * 1e9), result.start_ns + int(w.end_s * 1e9), outages_only=False)]
    if len(calm) < 2:
        return None
    first, last = calm[0], calm[-1]
    parts = []
    queued = saturation(load_windows(result, spec.window_s)) is not None  # a queue under a steady service
    if not queued and _enough(first) and _enough(last) and first.ttft_p95_ms is not None and \
            last.ttft_p95_ms is not None:
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


SOAK_RULES = (degradation, kv_leak, errors_after_recovery, saturated)
