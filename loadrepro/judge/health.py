"""/health as an orchestrator would read it: how slowly it answered, and whether a liveness probe with the
deployment's timeout, period and failure threshold would have restarted the engine. Pure.

A liveness probe fails when its answer is not 200 or comes later than its timeout; after `failures` failed probes
in a row, Kubernetes (and Ray Serve, in its own words) restarts the container, healthy or not. Under load, engines
answer /health late (vllm#24207, ray#54070): a load test is where a user learns that their probes would kill a
healthy engine.
"""

from __future__ import annotations

from loadrepro.config.profile import VerdictSpec, WatchSpec
from loadrepro.judge.death import DEATH_POLLS
from loadrepro.judge.findings import Finding, Severity
from loadrepro.judge.measurements import Measurements
from loadrepro.judge.polls import outside_outages, polls_outside_faults, sent, slow_polls, usable_health
from loadrepro.records import HealthSample, Outcome, RunResult


def _described(watch: WatchSpec) -> str:
    return (f"a liveness probe with timeout {watch.liveness_timeout_s:g} s, period {watch.liveness_period_s:g} s and "
            f"{watch.liveness_failures} failures")


def liveness(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """A liveness probe with [watch] liveness_timeout_s, liveness_period_s and liveness_failures (Kubernetes'
    defaults: 1 s, 10 s, 3) would have restarted the engine: that many of its probes in a row would have failed
    (not 200, or slower than the timeout). A warning: the orchestrator's judgement, not the engine's failure; says
    how many requests the engine completed after that moment."""
    restart = measured.restart
    if restart is None:
        return None
    served = sum(1 for r in result.records if r.outcome is Outcome.OK and r.end_ns > restart.t_ns)
    after = f"; the engine completed {served} requests after that" if served else ""
    return Finding("liveness", Severity.INFO,
                   f"warning: {_described(result.watch)} would have restarted this engine at t = "
                   f"{result.seconds(restart.t_ns):.1f} s (/health failing or slower than "
                   f"{result.watch.liveness_timeout_s:g} s since {result.seconds(restart.first_ns):.1f} s){after}")


def _slowest(polls: list[HealthSample]) -> HealthSample:
    return max(polls, key=lambda h: h.latency_ns)


def health_latency(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """/health answered slower than [watch] health_timeout_s (a warning: a slow answer is still an answer), or
    slower than [verdict] max_health_latency_s when that is > 0 (a failure). Unanswered polls count at the time
    they were given up."""
    polls = polls_outside_faults(result)
    limit = spec.max_health_latency_s
    over = [h for h in polls if limit > 0 and h.latency_ns > limit * 1e9]
    if over:
        worst = _slowest(over)
        return Finding("health_latency", Severity.FAIL,
                       f"/health answered slower than max_health_latency_s ({limit:g} s) {len(over)} times (slowest "
                       f"{worst.latency_ns / 1e9:.2f} s at {result.seconds(worst.t_ns):.1f} s)")
    timeout = result.watch.health_timeout_s
    slow = slow_polls(polls, result.watch)
    if not slow:
        return None
    worst = _slowest(slow)
    return Finding("health_latency", Severity.INFO,
                   f"warning: /health answered slower than health_timeout_s ({timeout:g} s) {len(slow)} times "
                   f"(slowest {worst.latency_ns / 1e9:.2f} s at {result.seconds(worst.t_ns):.1f} s)")


def _healthy_through(polls: list[HealthSample], start_ns: int, end_ns: int) -> bool:
    """/health answered 200 at the last poll before `start_ns` and at every poll until the first after `end_ns`."""
    before = [h for h in polls if h.t_ns <= start_ns][-1:]
    during = [h for h in polls if start_ns < h.t_ns <= end_ns]
    after = [h for h in polls if h.t_ns > end_ns][:1]
    seen = before + during + after
    return bool(before) and bool(during or after) and all(h.healthy for h in seen)


def wedged_while_healthy(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """A canary ([watch] canary_interval_s) got no token (stalled or timed out) while /health answered 200 before,
    during and after it: the engine is wedged while telling its orchestrator all is well. Names when the engine
    last made progress. Threshold: one canary."""
    polls = usable_health(result)
    canaries = list(result.canaries)
    canaries = [canaries[i] for i in outside_outages(result, [(c.t_ns, c.end_ns) for c in canaries])]
    wedged = [c for c in canaries if c.outcome in (Outcome.STALLED.value, Outcome.TIMEOUT.value)
              and _healthy_through(polls, c.t_ns, c.end_ns)]
    if not wedged:
        return None
    first = wedged[0]
    since = (f"no token on any stream since {result.seconds(first.progress_ns):.1f} s"
             if first.progress_ns >= result.start_ns else "no token on any stream since the load started")
    return Finding("wedged_while_healthy", Severity.FAIL,
                   f"engine wedged while /health answered 200: {since}; the canary sent at "
                   f"{result.seconds(first.t_ns):.1f} s got nothing in {(first.end_ns - first.t_ns) / 1e9:.1f} s "
                   f"({len(wedged)} of {len(canaries)} canaries got nothing)")


def _longest_silence(polls: list[HealthSample]) -> list[HealthSample]:
    """The longest run of consecutive polls that got no answer at all."""
    longest: list[HealthSample] = []
    current: list[HealthSample] = []
    for poll in polls:
        current = current + [poll] if poll.status == "unreachable" else []
        if len(current) > len(longest):
            longest = current
    return longest


def frontend_unresponsive(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """/health unanswered DEATH_POLLS or more times in a row while the engine was not judged dead (its process
    ran, or it kept making progress, and /health answered again): its HTTP frontend was unresponsive. A warning
    with how long: what did not progress meanwhile is the stall and timeout rules' to judge.

    Facts: `polls` (unanswered in a row), `from_s`, `to_s`."""
    if result.left_service or (result.post_health is not None and not result.post_health.healthy):
        return None  # the engine died or left service: engine_death says so
    silence = _longest_silence(usable_health(result))
    if len(silence) < DEATH_POLLS:
        return None
    start, end = sent(silence[0]), silence[-1].t_ns
    return Finding("frontend_unresponsive", Severity.INFO,
                   f"warning: /health went unanswered {len(silence)} times in a row from "
                   f"{result.seconds(start):.1f} s to {result.seconds(end):.1f} s ({(end - start) / 1e9:.1f} s) "
                   "while the engine was alive (its process running, or making progress) and answered again: its "
                   "HTTP frontend was unresponsive, not dead",
                   {"polls": len(silence), "from_s": round(result.seconds(start), 3),
                    "to_s": round(result.seconds(end), 3)})


