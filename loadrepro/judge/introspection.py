"""Rule introspection_unresponsive: the engine's introspection endpoint ([watch] introspection_path, llama.cpp's
/slots) stopped answering while its /health still answered 200: a scheduler wedged behind a live frontend
(llama.cpp #27388: tokens stop, /slots hangs, /health answers 200). Whether tokens still came meanwhile decides
how much it weighs: none, a failure; some, a warning (a busy engine may answer its introspection late while its
scheduler still works). Pure."""

from __future__ import annotations

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Finding, Severity
from loadrepro.records import FaultSpans, HealthSample, RunResult

LEAST_UNANSWERED = 2  # polls given up in a row: one slow answer of a busy engine is not a wedge


def _silence(polls: tuple[HealthSample, ...]) -> tuple[int, int, int, bool] | None:
    """The first run of at least LEAST_UNANSWERED polls given up in a row: (from, until, how many, to the end)."""
    start = None
    for i, poll in enumerate((*polls, None)):
        if poll is not None and poll.status == "unreachable":
            start = i if start is None else start
            continue
        if start is not None and i - start >= LEAST_UNANSWERED:
            first, last = polls[start], polls[i - 1]
            return first.t_ns - first.latency_ns, last.t_ns, i - start, poll is None
        start = None
    return None


def introspection_unresponsive(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """At least two polls of [watch] introspection_path in a row got no answer within introspection_timeout_s while
    every /health poll answered meanwhile answered 200 (at least one did). Fails the run when no token of
    loadrepro's streams came meanwhile: the engine's frontend is alive, its scheduler is not. A warning when tokens
    still came: the scheduler worked, only its introspection lagged. Not judged while a fault on purpose had the
    engine down.

    Facts: `unanswered` (polls), `from_s`, `until_s` (-1: to the end), `health_200` (polls meanwhile),
    `tokens_meanwhile`, `in_flight` (loadrepro's requests under way then)."""
    found = _silence(result.introspection)
    if found is None or FaultSpans.of(result.faults).overlaps(found[0], found[1]):
        return None
    start, end, unanswered, to_end = found
    health = [p for p in result.health if start <= p.t_ns <= end]
    if not health or any(p.status != 200 for p in health):
        return None
    tokens = sum(start <= t <= end for r in result.records for t in r.chunk_ns)
    in_flight = sum((r.sent_ns or r.end_ns) <= end and r.end_ns >= start for r in result.records)
    path = result.watch.introspection_path
    until = "to the end of the run" if to_end else f"until {result.seconds(end):.1f} s"
    polls = f"{unanswered} polls given up after {result.watch.introspection_timeout_s:g} s each, {until}"
    facts = {"unanswered": unanswered, "from_s": round(result.seconds(start), 3),
             "until_s": -1.0 if to_end else round(result.seconds(end), 3), "health_200": len(health),
             "tokens_meanwhile": tokens, "in_flight": in_flight}
    if tokens:
        return Finding("introspection_unresponsive", Severity.INFO,
                       f"warning: {path} went unanswered from {result.seconds(start):.1f} s ({polls}) while /health "
                       f"answered 200, but {tokens} tokens still came meanwhile: the scheduler worked", facts)
    return Finding("introspection_unresponsive", Severity.FAIL,
                   f"{path} stopped answering at {result.seconds(start):.1f} s ({polls}) while /health answered 200 "
                   f"({len(health)} polls): the engine's frontend lived on, its scheduler did not; no token came "
                   f"meanwhile, with {in_flight} requests in flight", facts)
