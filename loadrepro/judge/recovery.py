"""Recovery from faults on purpose ([[chaos.events]]): for each, the engine's state before it and how long until it
was back to that state; rule no_recovery. Pure.

Back means, each from when loadrepro's part of the fault ended (the engine started again after a kill or restart,
SIGCONT after a pause; at once for an abort burst or an oversize request): /health answered 200 again (the
fault's own polls); requests sent after that got their first tokens within [verdict] max_ttft_growth of the TTFT
p95 of the last BEFORE requests before the fault (groups of GROUP requests, in the order they were sent, until
one group's p95 is within it); and the engine ran no more requests than loadrepro had in flight (its running
count at a scrape against loadrepro's in-flight count then: more is requests it never freed; back with /health when
the first scrape after it already says so, since a /metrics that answers late or not at all for a while, as
llama.cpp's 503 while it loads its model again, says nothing against the engine); and its KV usage at
the last quiet moment after the fault (nothing running or waiting, the scrapes after the load included) was within
[verdict] max_kv_leak of the lowest at a quiet moment before it (more is blocks it never freed; quiet moments up
to the next fault; with faults on purpose the engine is scraped once at the load's start, a quiet moment). When
quiet moments come is the load's doing, not the engine's, so KV's time back is reported but not counted in the
recovery time. A part with nothing to judge it by (too few requests before the fault, fewer than GROUP sent after
it before the load ended, no running count, no quiet moment before or after it) is said, and not held against the
engine. An oversize request must also have been refused cleanly. The requests that failed while it was in effect are
counted by the one definition the runner marks them `faulted` by (records.FaultSpans): an outage's only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import counted
from loadrepro.judge.windows import MIN_SAMPLES, TTFT_FLOOR_MS
from loadrepro.records import (
    KV_USAGE,
    RUNNING,
    Fault,
    FaultSpans,
    MetricsSample,
    Outcome,
    RequestRecord,
    RunResult,
    quiet,
)

BEFORE = 16  # the TTFT before a fault: the last this many completed requests sent before it (since any earlier
# fault): a count, not a time, so that the load's ramp-up leaves it once the load is steady
SINCE = {"kill": "after it was started again", "restart": "after it was started again", "pause": "after SIGCONT"}
GROUP = 8  # requests sent after a fault, judged together: one slow first token is not "not back"


@dataclass(frozen=True, slots=True)
class Recovery:
    """One fault and the engine's way back, in seconds from when loadrepro's part of it ended (the engine started
    again, SIGCONT sent; the fault itself for an abort burst or an oversize request)."""

    fault: Fault
    at_s: float
    done_s: float  # when loadrepro's part of it ended, seconds into the load: the times below count from here
    before_ttft_p95_ms: float | None
    before_running: float | None
    before_kv_usage: float | None  # the lowest at a quiet moment before it
    health_s: float | None  # /health 200 again (None: not within recover_within_s)
    ttft_s: float | None  # first tokens back within max_ttft_growth (None: not seen)
    ttft_judged: bool  # there were requests before the fault to compare with, and a group's worth sent after it
    sent_after: int  # requests sent from /health 200 again on (fewer than GROUP: the load ended too soon)
    running_s: float | None  # the engine's running count back to loadrepro's in flight (None: not seen)
    running_judged: bool  # the engine publishes its running count
    kv_s: float | None  # KV usage at a quiet moment back within max_kv_leak of before (None: not seen)
    after_kv_usage: float | None  # at the last quiet moment after it (None: none, so not judged)
    kv_held: bool  # after_kv_usage beyond max_kv_leak of before: blocks it never freed
    faulted: int  # requests that failed while it was in effect (outcome faulted)
    recovered: bool
    recovery_s: float | None  # when every part judged was back
    detail: str  # the fault, the engine's way back and the verdict on it, in words
    # Not back, though /health was, when the run ended within recover_within_s of it: the rest of the way back was
    # not watched, so it is not judged (an engine whose /health never came back is judged all the same).
    cut_short: bool = False
    # A scrape answered the running count after /health was back (False: /metrics did not, so it is not judged).
    running_scraped: bool = True

    # The report's chaos row is this measurement (run_report.ChaosRow reads these by name).
    @property
    def action(self) -> str:
        return self.fault.action

    @property
    def recover_within_s(self) -> float:
        return self.fault.recover_within_s

    def parts(self) -> dict[str, str]:
        """Each part of the way back: `back`, `not_back` or `not_judged` (KV: `held` for blocks never freed)."""
        ttft = ("not_judged" if self.before_ttft_p95_ms is None or not self.ttft_judged
                else "back" if self.ttft_s is not None else "not_back")
        # a dead engine's metrics, frozen at its last scrape, say nothing of what it runs
        running = ("not_judged" if not self.running_judged or not self.running_scraped
                   or (self.running_s is None and self.health_s is None)
                   else "back" if self.running_s is not None else "not_back")
        kv = ("not_judged" if self.before_kv_usage is None or self.after_kv_usage is None
              else "held" if self.kv_held else "back")
        return {"health": "back" if self.health_s is not None else "not_back", "ttft": ttft, "running": running,
                "kv": kv}


def _ttft(records: list[RequestRecord]) -> float | None:
    ttfts = [t for r in records if r.outcome is Outcome.OK and (t := r.ttft_ms) is not None]
    return float(np.percentile(ttfts, 95)) if len(ttfts) >= MIN_SAMPLES else None


def _ttft_back(records: list[RequestRecord], from_ns: int, limit_ms: float) -> int | None:
    """When the first group of GROUP completed requests sent from `from_ns` had its TTFT p95 within `limit_ms`."""
    after = sorted((r for r in records if r.sent_or_queued_ns >= from_ns and r.outcome is Outcome.OK
                    and r.ttft_ms is not None), key=lambda r: r.sent_or_queued_ns)
    for i in range(0, len(after) - GROUP + 1, GROUP):
        group = after[i:i + GROUP]
        p95 = _ttft(group)
        if p95 is not None and p95 <= limit_ms:
            return max(r.sent_or_queued_ns + round((r.ttft_ms or 0.0) * 1e6) for r in group)
    return None


def _before(result: RunResult, at_ns: int) -> tuple[float | None, float | None]:
    """The engine's running count at the last scrape before the fault, and its lowest KV usage at a quiet moment
    before it."""
    samples = [m for m in result.metrics if m.t_ns < at_ns]
    last = samples[-1].values if samples else {}
    return last.get(RUNNING), min((kv for _, kv in _quiet_kv(samples)), default=None)


def _quiet_kv(samples: list[MetricsSample]) -> list[tuple[int, float]]:
    return [(m.t_ns, m.values[KV_USAGE]) for m in samples if KV_USAGE in m.values and quiet(m.values)]


def _kv_back(result: RunResult, from_ns: int, until_ns: int | None, before: float | None,
             spec: VerdictSpec) -> tuple[int | None, float | None]:
    """The first quiet moment from `from_ns` (until the next fault) with KV usage within max_kv_leak of `before`
    (None: not seen), and the KV usage at the last one (None: none, or nothing before to compare with)."""
    scrapes = [m for m in result.metrics if m.t_ns >= from_ns and (until_ns is None or m.t_ns < until_ns)]
    after = _quiet_kv(scrapes) if before is not None else []
    back = next((t for t, kv in after if kv <= before + spec.max_kv_leak), None) if before is not None else None
    return back, after[-1][1] if after else None


def _running_back(result: RunResult, from_ns: int | None) -> tuple[bool, bool, int | None]:
    """Whether the running count is published; whether a scrape answered it from `from_ns` (/health 200 again) on;
    and when it was no more than loadrepro's requests in flight (None: never seen so): at `from_ns` when the first
    such scrape says so, since how long /metrics took to answer is not the engine's way back; else at the first
    scrape that did, after those that saw more running."""
    scrapes = [m for m in result.metrics if RUNNING in m.values and m.in_flight is not None]
    after = [m for m in scrapes if from_ns is not None and m.t_ns >= from_ns]
    first = next((i for i, m in enumerate(after) if m.values[RUNNING] <= (m.in_flight or 0)), None)
    back = None if first is None else from_ns if first == 0 else after[first].t_ns
    return bool(scrapes), bool(after), back


def recovery(result: RunResult, fault: Fault, spec: VerdictSpec) -> Recovery:
    records = list(result.records)
    at = fault.at_ns
    # since the last fault over before it: one still going on when it was caused (malformed requests still being
    # sent when a kill came) would leave no request before it to judge its TTFT by
    since = max([result.start_ns, *(f.over_ns for f in result.faults if f.at_ns < at and f.over_ns <= at)])
    served = sorted((r for r in records if since <= r.sent_or_queued_ns < at and r.outcome is Outcome.OK
                     and r.ttft_ms is not None), key=lambda r: r.sent_or_queued_ns)
    before = _ttft(served[-BEFORE:])
    running, kv = _before(result, at)
    back = fault.back_ns
    limit = max(before * (1 + spec.max_ttft_growth), before + TTFT_FLOOR_MS) if before is not None else None
    sent_after = sum(1 for r in records if back is not None and r.sent_or_queued_ns >= back)
    judged = before is not None and (back is None or sent_after >= GROUP)
    ttft_ns = _ttft_back(records, back, limit) if back is not None and limit is not None and judged else None
    published, scraped, running_ns = _running_back(result, back)
    until = min([f.at_ns for f in result.faults if f.at_ns > at], default=None)
    kv_ns, kv_after = _kv_back(result, back or fault.done_ns, until, kv, spec)
    kv_held = kv is not None and kv_after is not None and kv_after > kv + spec.max_kv_leak
    own = FaultSpans.of([fault])
    faulted = sum(1 for r in records if r.outcome is Outcome.FAULTED and own.overlaps(r.sent_or_queued_ns, r.end_ns))
    parts = [back, *([ttft_ns] if judged else []), *([running_ns] if published and scraped else [])]
    known = [p for p in parts if p is not None]
    recovered_ns = max(known) if len(known) == len(parts) else None
    done = fault.done_ns  # the engine's time to be back runs from when loadrepro's part of the fault ended
    seconds = (recovered_ns - done) / 1e9 if recovered_ns is not None else None
    # a malformed request's refusal is bad_input_crash's to judge (judge/soak.py); here, only the way back
    clean = fault.clean or fault.action == "malformed"
    recovered = clean and not kv_held and seconds is not None and seconds <= fault.recover_within_s

    def after(t: int | None) -> float | None:
        return (t - done) / 1e9 if t is not None else None

    rec = Recovery(fault, result.seconds(at), result.seconds(done), before, running, kv, after(back), after(ttft_ns),
                   judged, sent_after, after(running_ns), published, after(kv_ns), kv_after, kv_held, faulted,
                   recovered, seconds, "")
    watched_s = (result.end_ns - done) / 1e9
    cut_short = not recovered and clean and not kv_held and back is not None and watched_s < fault.recover_within_s
    return _with_words(dataclasses.replace(rec, cut_short=cut_short, running_scraped=scraped or back is None), limit,
                       watched_s)


def _with_words(r: Recovery, limit_ms: float | None, watched_s: float) -> Recovery:
    """`watched_s`: how long after the fault the run went on; shorter than the fault's window when the run ended
    first (the engine died: nothing waits out a dead engine), which the words then say."""
    f = r.fault
    window = (f"within {f.recover_within_s:g} s" if watched_s >= f.recover_within_s else
              f"before the run ended, {max(watched_s, 0.0):.1f} s after it")
    parts = [f.detail]
    parts.append(f"/health 200 after {r.health_s:.1f} s" if r.health_s is not None else f"/health not 200 {window}")
    if r.before_ttft_p95_ms is None:
        parts.append(f"TTFT not judged: fewer than {MIN_SAMPLES} requests completed before it (since any earlier "
                     "fault)")
    elif not r.ttft_judged:
        parts.append(f"TTFT not judged: {r.sent_after} requests were sent after it, fewer than {GROUP} (the load "
                     "ended)")
    elif r.ttft_s is not None:
        parts.append(f"TTFT p95 back within {limit_ms:,.0f} ms (it was {r.before_ttft_p95_ms:,.0f} ms) after "
                     f"{r.ttft_s:.1f} s")
    else:
        parts.append(f"TTFT p95 never back within {limit_ms:,.0f} ms (it was {r.before_ttft_p95_ms:,.0f} ms "
                     f"before)")
    running = r.parts()["running"]
    if not r.running_judged:
        parts.append("running requests not judged: the engine publishes no running count")
    elif running == "back":
        parts.append(f"running no more than loadrepro's in flight after {r.running_s or 0.0:.1f} s")
    elif running == "not_judged" and not r.running_scraped:
        parts.append("running requests not judged: /metrics answered no running count after /health 200 again")
    elif running == "not_judged":
        parts.append("running requests not judged: /health did not answer 200 again")
    else:
        parts.append("the engine kept running more requests than loadrepro had in flight")
    parts.append(_kv_words(r))
    if r.faulted:
        parts.append(f"{counted(r.faulted, 'request')} failed meanwhile (the fault's, not the engine's)")
    late = r.recovery_s is None or r.recovery_s > f.recover_within_s
    heads = [*(["not refused cleanly"] if not f.clean and f.action != "malformed" else []),
             *([f"not back {window}"] if late else []),
             *(["its KV blocks not freed"] if r.kv_held else [])]
    head = " and ".join(heads) if heads else f"back {r.recovery_s:.1f} s {SINCE.get(f.action, 'after it')}"
    return dataclasses.replace(r, detail=f"{head}: " + "; ".join(parts))


def _kv_words(r: Recovery) -> str:
    if r.before_kv_usage is None:
        return "KV not judged: no quiet moment before it (nothing running or waiting) with the KV usage published"
    if r.after_kv_usage is None:
        return "KV not judged: no quiet moment after it"
    if r.kv_held:
        return (f"KV usage with nothing running still {r.after_kv_usage:.1%} at the last quiet moment "
                f"({r.before_kv_usage:.1%} before): blocks it never freed")
    return f"KV usage at a quiet moment back to {r.before_kv_usage:.1%} or near it after {r.kv_s or 0.0:.1f} s"


def recoveries(result: RunResult, spec: VerdictSpec) -> list[Recovery]:
    return [recovery(result, f, spec) for f in result.faults]
