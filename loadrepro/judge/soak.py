"""Rules over a run's measurements (judge/measurements.py, measured once per judgement): recovery from faults on
purpose, and what only a long run can break: degradation (TTFT or errors growing from the first steady window to
the last), a KV leak (KV usage at quiet moments creeping up), errors that come back after a recovery; and what is
not a failure but looks like one, saturation. Pure."""

from __future__ import annotations

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Fact, Finding, Severity, grouped
from loadrepro.judge.measurements import Measurements
from loadrepro.judge.recovery import SINCE
from loadrepro.judge.windows import MIN_SAMPLES, REFERENCE_WINDOW, TTFT_FLOOR_MS, Saturation, Window
from loadrepro.records import Outcome, RunResult


def no_recovery(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """A fault on purpose ([[chaos.events]]) after which the engine was not back within the event's
    recover_within_s: /health 200, TTFT p95 within max_ttft_growth of before, no more requests running than
    loadrepro had in flight; or its KV usage at the last quiet moment after it more than max_kv_leak above before
    (blocks never freed); or an oversize request not refused cleanly. Threshold: one fault. When every fault
    recovered, says how fast (info). A fault never caused (the load ended before its time, or while an earlier
    fault had the engine down) is said with why, and judges nothing; so is one the run ended too soon after to
    judge (its /health back, the rest of its way back not watched for all of recover_within_s).

    Facts: `faults` (caused), `not_recovered`, `cut_short`, `not_caused`; of the first not recovered (else the
    first recovered): `action`, `at_s`, `recovery_s` (-1: not back), and each part of its way back, `health`,
    `ttft`, `running`, `kv` (`back`, `not_back`, `not_judged`; KV `held`)."""
    found = measured.recoveries
    missed = [r for r in found if not r.recovered and not r.cut_short]
    unjudged = [f"the {r.fault.action.replace('_', ' ')} at {r.at_s:.1f} s not judged: /health was 200 again, and "
                f"the run ended before its recover_within_s ({r.recover_within_s:g} s) was over"
                for r in found if r.cut_short]
    never = "; ".join([*unjudged, *(f"the {f.action.replace('_', ' ')} at {f.at_s:g} s was never caused: {f.why}"
                                    for f in result.not_caused)])
    back = [r for r in found if r.recovered]
    facts: dict[str, Fact] = {"faults": len(found), "not_recovered": len(missed),
                              "cut_short": sum(r.cut_short for r in found), "not_caused": len(result.not_caused)}
    if (first := next(iter(missed or back), None)) is not None:
        facts |= {"action": first.action, "at_s": round(first.at_s, 3),
                  "recovery_s": round(first.recovery_s, 3) if first.recovery_s is not None else -1.0,
                  **first.parts()}
    if missed:
        return Finding("no_recovery", Severity.FAIL, "; ".join(
            f"{r.fault.action.replace('_', ' ')} at {r.at_s:.1f} s {r.detail}" for r in missed)
            + (f"; {never}" if never else ""), facts)
    if not back:
        return Finding("no_recovery", Severity.INFO, never, facts) if never else None
    said = "every fault on purpose recovered: " if len(back) == len(found) else "recovered: "
    return Finding("no_recovery", Severity.INFO, said + ", ".join(
        f"{r.fault.action.replace('_', ' ')} at {r.at_s:.1f} s back {r.recovery_s:.1f} s "
        f"{SINCE.get(r.fault.action, 'after it')}" for r in back) + (f"; {never}" if never else ""), facts)


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


def saturated(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """Information, not a failure: arrivals outpaced the engine's steady service (see `saturation`), so requests
    queued and waited longer window after window while nothing failed. Says when it began, at what rates, and how
    the queue, the engine's waiting count and TTFT grew. With [load] stop_when_saturated the load ends there.

    Facts: `from_s`, `arrived_per_s`, `completed_per_s`, `windows`, and each grown from the first window to the last
    (`_from`, `_to`): `in_flight`, `unsent` (requests due, waiting in loadrepro for a slot of its concurrency),
    `waiting` (the engine's, when published)."""
    found = measured.saturation
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
                   + ", with nothing failing: the engine is at capacity, not broken", _saturation_facts(found))


def _saturation_facts(found: Saturation) -> dict[str, Fact]:
    first, last = found.first, found.last
    window_s = first.end_s - first.start_s
    facts: dict[str, Fact] = {
        "from_s": first.start_s, "arrived_per_s": round(first.due / window_s, 3),
        "completed_per_s": round(first.ended / window_s, 3), "windows": len(found.windows),
        "in_flight_from": first.in_flight_end, "in_flight_to": last.in_flight_end,
        "unsent_from": first.unsent_end, "unsent_to": last.unsent_end}
    waiting = [w.waiting_max for w in found.windows if w.waiting_max is not None]
    if waiting:
        facts |= {"waiting_from": waiting[0], "waiting_to": waiting[-1]}
    return facts


def degradation(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """The last window against the first steady one: TTFT p95 grown by more than `max_ttft_growth` (and by more
    than TTFT_FLOOR_MS) beyond doubt, or the error rate up by more than `max_error_growth`. Needs three windows.
    For TTFT the last window is the last with MIN_SAMPLES first tokens: a run's tail (its last arrivals, and the
    drain of its last requests) can be a window of its own holding a few, which says nothing of TTFT.
    Beyond doubt: the lowest the last window's p95 may be (windows.quantile_bounds) against the highest the first's
    may be, so a few slow requests in a window of a few dozen (its p95 their slowest) are not degradation.
    TTFT grown by saturation (a queue growing under a steady service, rule `saturated`) is not degradation; nor is
    a fault on purpose's: windows that overlap one, from when it was caused until /health 200 again, are neither
    compared nor compared with (the engine's way back is no_recovery's to judge)."""
    found = measured.windows
    if len(found) < 3:
        return None
    faults = result.fault_spans
    calm = [w for w in found[REFERENCE_WINDOW:] if not faults.overlaps(
        result.start_ns + int(w.start_s * 1e9), result.start_ns + int(w.end_s * 1e9), outages_only=False)]
    if len(calm) < 2:
        return None
    first, last = calm[0], calm[-1]
    parts = []
    queued = measured.saturation is not None  # a queue under a steady service
    # A tail window of a few requests must not hide the growth the windows before it show.
    timed = next((w for w in reversed(calm[1:]) if _enough(w)), last)
    if not queued and _enough(first) and _enough(timed) and first.ttft_p95_bounds_ms and timed.ttft_p95_bounds_ms:
        (_, high), (low, _) = first.ttft_p95_bounds_ms, timed.ttft_p95_bounds_ms
        if low - high > TTFT_FLOOR_MS and low > high * (1 + spec.max_ttft_growth):
            parts.append(f"TTFT p95 grew from {first.ttft_p95_ms:,.0f} ms in {first.span} to "
                         f"{timed.ttft_p95_ms:,.0f} ms in {timed.span} (at most +{spec.max_ttft_growth:.0%} allowed; "
                         f"its p95 at least {low:,.0f} ms now against at most {high:,.0f} ms then)")
    if first.requests and last.requests and last.error_rate - first.error_rate > spec.max_error_growth:
        parts.append(f"the error rate grew from {first.error_rate:.1%} in {first.span} to {last.error_rate:.1%} in "
                     f"{last.span} (at most +{spec.max_error_growth:.0%} allowed)")
    return Finding("degradation", Severity.FAIL, "; ".join(parts)) if parts else None


def _enough(w: Window) -> bool:
    return sum(n for o, n in w.outcomes.items() if o == Outcome.OK.value) >= MIN_SAMPLES


def kv_leak(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """KV usage at quiet moments (nothing running or waiting) creeping up window after window by more than
    `max_kv_leak` in all: blocks the engine never frees. Needs quiet moments in three windows.

    Facts: `kv_usage_from` (the first window's), `kv_usage_to` (the last's), `windows` (with a quiet moment)."""
    quiet = [(w, w.kv_usage_quiet) for w in measured.windows if w.kv_usage_quiet is not None]
    if len(quiet) < 3:
        return None
    steps = [b - a for (_, a), (_, b) in zip(quiet, quiet[1:])]
    rise = quiet[-1][1] - quiet[0][1]
    if rise <= spec.max_kv_leak or min(steps) < -spec.max_kv_leak / 10:
        return None
    (first, low), (last, high) = quiet[0], quiet[-1]
    return Finding("kv_leak", Severity.FAIL, f"KV usage with nothing running crept up from {low:.1%} in {first.span} "
                   f"to {high:.1%} in {last.span}, window after window: blocks the engine never frees",
                   {"kv_usage_from": low, "kv_usage_to": high, "windows": len(quiet)})


def errors_after_recovery(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """Failures, then a window with completed requests and none failed (a recovery), then failures again."""
    failing: Window | None = None
    recovered: Window | None = None
    for w in measured.windows:
        if w.failed and recovered is not None and failing is not None:
            return Finding("errors_after_recovery", Severity.FAIL,
                           f"errors came back in {w.span} ({w.failed} of {w.requests} requests failed) after the "
                           f"engine had recovered in {recovered.span}, following failures in {failing.span}")
        if w.failed:
            failing = w
        elif failing is not None and w.outcomes.get(Outcome.OK.value):
            recovered = w
    return None


def bad_input_crash(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """A malformed request ([[chaos.events]] action = "malformed") the engine stopped answering (nothing within
    15 s), or after which its /health turned (asked after each; for 3 s after the last of a kind of which one got an
    answer not a 4xx, since an engine may die a moment after failing one). Names the first kind that did it; one a
    kill, restart or pause on purpose met is that fault's, not judged. Threshold: one request. A warning when
    the engine kept serving but answered some otherwise than with a 4xx (a 500 for broken JSON, a 200 for a
    negative max_tokens): a wrong status, not a crash."""
    malformed = [f for f in result.faults if f.action == "malformed"]
    if bad := [f for f in malformed if not f.clean]:
        return Finding("bad_input_crash", Severity.FAIL, "; ".join(
            f"malformed input at {result.seconds(f.at_ns):.1f} s: {f.culprit} (the first the engine did not "
            "survive: no answer, or /health not 200 after it)" for f in bad))
    if odd := [f for f in malformed if f.unrefused]:
        return Finding("bad_input_crash", Severity.INFO, "warning: " + "; ".join(
            f"malformed input at {result.seconds(f.at_ns):.1f} s answered otherwise than with a 4xx while the engine "
            f"kept serving: {'; '.join(grouped(f.unrefused))}" for f in odd))
    return None


SOAK_RULES = (degradation, kv_leak, errors_after_recovery, saturated)
