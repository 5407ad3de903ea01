"""Classification rules: pure functions of a RunResult (and the profile's [verdict] section) -> Finding or None.

RULES is the explicit, ordered list (the per-window rules of long runs last, from windows.py); the report lists every
rule and whether it fired. A finding of severity
`fail` fails the run; `info` is reported but passes (pressure handled, clean rejections, throttling).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Literal

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.admission import (
    capacity_mismatch,
    nothing_fit,
    prefix_reuse_missing,
    rejections,
    throttling,
)
from loadrepro.judge.answers import ANSWER_RULES
from loadrepro.judge.cold_start import COLD_START_S, cold_start_s, cold_start_words
from loadrepro.judge.deployment import DEPLOYMENT_RULES
from loadrepro.judge.findings import FAILED, Finding, Rule, Severity, quote
from loadrepro.judge.health import frontend_unresponsive, health_latency, liveness, wedged_while_healthy
from loadrepro.judge.introspection import introspection_unresponsive
from loadrepro.judge.measurements import Measurements, series
from loadrepro.judge.memory import memory_growth
from loadrepro.judge.polls import frontend_hung, left_service, usable_health
from loadrepro.judge.prompts import prompt_lengths, prompt_truncated
from loadrepro.judge.replicas import replica_health, sent_to
from loadrepro.judge.signatures import CATALOG, SignatureClass
from loadrepro.judge.slo import SLO_RULES
from loadrepro.judge.soak import SOAK_RULES, bad_input_crash, no_recovery
from loadrepro.judge.speculative import acceptance_collapse
from loadrepro.judge.structured import STRUCTURED_RULES
from loadrepro.judge.waits import behind, queue_work
from loadrepro.records import (
    KV_USAGE,
    RUNNING,
    HealthSample,
    Outcome,
    RequestRecord,
    RunResult,
    StopReason,
    replica_name,
)

UNADMITTED = (Outcome.REJECTED, Outcome.THROTTLED, Outcome.CANCELLED, Outcome.FAULTED)  # not the engine's to serve
HEALTHY_MARGIN_POLLS = 2  # a failure counts as "while healthy" only if /health stayed 200 this many polls after


def _failed(result: RunResult) -> list[RequestRecord]:
    return sorted((r for r in result.records if r.outcome in FAILED), key=lambda r: r.end_ns)


def _first_fatal(result: RunResult, replica: int | None = None) -> tuple[float, str, str] | None:
    """When and what the first fatal text was, and its signature's name, from an engine log or from a response (of
    that replica's alone when `replica` is given: 0 the target)."""
    # At equal times the log's earlier line wins, and the log wins over a response that quotes it.
    seen = [(m.t_ns, 0, m.line_number, _from_signature(m.line), m.signature) for m in result.log_matches
            if m.klass == SignatureClass.FATAL.value and replica in (None, m.replica)]
    seen += [(r.end_ns, 1, r.id, r.detail, r.signature or "") for r in result.records
             if r.signature_class == SignatureClass.FATAL.value and replica in (None, r.replica)]
    if not seen:
        return None
    t_ns, _, _, text, signature = min(seen)
    return result.seconds(t_ns), text, signature


def _from_signature(line: str) -> str:
    """A log line from where its signature starts: the timestamp and level before it say nothing new."""
    for signature in CATALOG:
        found = signature.pattern.search(line)
        if found:
            return line[found.start():]
    return line


def _health_after(result: RunResult, t_ns: int) -> tuple[str, int | str]:
    """What /health did from `t_ns` on: ("200", 200) throughout, ("back", status) when it came back after a
    non-200 status, ("down", status) from then on, ("unknown", "") with no poll."""
    polls = [h for h in usable_health(result) + ([result.post_health] if result.post_health else [])
             if h.t_ns >= t_ns]
    down = next((h for h in polls if not h.healthy), None)
    if down is None:
        return ("200", 200) if polls else ("unknown", "")
    back = any(h.healthy for h in polls if h.t_ns > down.t_ns) and (result.post_health is None or
                                                                     result.post_health.healthy)
    return ("back" if back else "down"), down.status


_HEALTH_AFTER = {"200": "; /health answered 200 throughout", "unknown": "; /health unknown from then on",
                 "back": "; /health came back"}


def engine_death(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """The engine left service: as the runner judged it while the load went on (judge/death.py: /health non-200
    DEATH_POLLS times in a row while requests failed and nothing progressed, or every request failing with a
    gateway's word that the engine behind it is unreachable), or its process exited, or /health was not 200
    after the run (the run's last word). The time is the first fatal text when one came before, else the
    earliest of those. Says whether /health came back.

    Facts: `t_s`; `judged_by` (`death`: judged while the load went on, `engine`: its process exited,
    `health_after_run`); `signature` (the first fatal text's, or empty); `failed_after` of `ending_after` requests
    ending after it; `health_after` (`200` throughout, `back`, `down`, `unknown`) and `health_status`."""
    left = left_service(result)
    if left is None:
        return None
    t_ns, said = left
    fatal = _first_fatal(result, replica=0)  # a replica's last words are not the target's
    t_s = min(result.seconds(t_ns), fatal[0]) if fatal else result.seconds(t_ns)
    words = f"engine died at {t_s:.1f} s"
    if fatal is not None:
        words += f" with {quote(fatal[1])}"
    if said is not None:
        words += f" ({said.text})"
    failed, later, complete = result.totals(spec.window_s).recent_ends.since(result.start_ns + round(t_s * 1e9))
    if later:
        words += f"; {failed}/{later} {'' if complete else 'of the latest '}requests ending after it failed"
    health, status = _health_after(result, t_ns)
    words += _HEALTH_AFTER.get(health, f"; /health {status} from then on")
    return Finding("engine_death", Severity.FAIL, words, {
        "t_s": round(t_s, 3), "judged_by": str(said.source) if said is not None else "health_after_run",
        "signature": fatal[2] if fatal else "", "failed_after": failed, "ending_after": later,
        "health_after": health, "health_status": status})


def failures_while_healthy(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Requests failed while /health kept answering 200 (before, at and HEALTHY_MARGIN_POLLS polls after the
    failure, or, for a failure the load's end came too soon after for that many, every poll after it and /health's
    last word after the run): the engine fails work but tells its orchestrator all is well. With replicas, each
    request against the /health of the replica it went to (a replica has no last word: its polls only). A failure
    not polled around so is not counted, and the words say how many of the failed requests were.

    Facts: `requests` (how many), `failed` (all the failed requests), `first_request` (its id) and
    `first_outcome`."""
    healths = [usable_health(result), *(replica_health(w) for w in result.replicas)]
    last_word = result.post_health if healths[0] else None  # the target's, which says nothing if it never said 200
    failed = _failed(result)
    around = [_health_around(r, healths[r.replica] if r.replica < len(healths) else [],
                             last_word if r.replica == 0 else None) for r in failed]
    hidden = [r for r, health in zip(failed, around, strict=True) if health == "200"]
    if not hidden:
        return None
    first = hidden[0]
    counted = (f"{len(hidden)} request{'' if len(hidden) == 1 else 's'} failed" if len(hidden) == len(failed) else
               f"{len(hidden)} of the {len(failed)} failed requests ended")
    words = f"{counted} while /health answered 200 (first: request {first.id}, {first.outcome}, {quote(first.detail)})"
    others = [f"{n} met a /health other than 200" if health == "not 200" else f"{n} were not polled before and after"
              for health in ("not 200", "unpolled") if (n := around.count(health))]
    if others:
        words += f"; of the others, {' and '.join(others)}"
    return Finding("failures_while_healthy", Severity.FAIL, words,
                   {"requests": len(hidden), "failed": len(failed), "first_request": first.id,
                    "first_outcome": str(first.outcome)})


def _health_around(record: RequestRecord, health: list[HealthSample],
                   last_word: HealthSample | None) -> Literal["200", "not 200", "unpolled"]:
    """What /health said around the record's end: at the poll before it and the HEALTHY_MARGIN_POLLS after it, or,
    when the load ended before that many came, at every one that did and at its last word after the run
    (`last_word`). "unpolled" when those polls were not all there to ask."""
    before = [h for h in health if h.t_ns <= record.end_ns][-1:]
    after = [h for h in health if h.t_ns > record.end_ns][:HEALTHY_MARGIN_POLLS]
    ended_first = len(after) < HEALTHY_MARGIN_POLLS and last_word is not None
    if ended_first and last_word is not None and all(h.t_ns != last_word.t_ns for h in after):
        after.append(last_word)  # (the recorder keeps it among the polls too: not asked twice)
    polls = before + after
    if not all(h.healthy for h in polls):
        return "not 200"
    return "200" if before and (len(after) == HEALTHY_MARGIN_POLLS or ended_first) else "unpolled"


def fatal_signature(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """A fatal engine error text (class F in the catalog or the profile) appeared in the log or a response;
    names the first log line that carries one, and how many responses did.

    Facts: `t_s`, `signature` (the first's), `log_line` (0: none in the log), `responses` (failed responses that
    carried one)."""
    fatal = _first_fatal(result)
    if fatal is None:
        return None
    t_s, text, signature = fatal
    log = next((m for m in result.log_matches if m.klass == SignatureClass.FATAL.value), None)
    in_responses = [r for r in result.records
                    if r.signature_class == SignatureClass.FATAL.value and r.outcome in FAILED]
    where = []
    if log is not None:
        whose = f"{replica_name(log.replica)}'s " if result.replicas else ""
        where.append(f"{whose}engine log line {log.line_number}")
        text = _from_signature(log.line)
    if in_responses:
        whose = sent_to(result, in_responses)
        where.append(f"{len(in_responses)} responses" + (f" ({whose})" if whose else ""))
    return Finding("fatal_signature", Severity.FAIL, f"fatal engine error at {t_s:.1f} s in {' and '.join(where)}: "
                   f"{quote(text)}", {"t_s": round(t_s, 3), "signature": signature,
                                      "log_line": log.line_number if log else 0, "responses": len(in_responses)})


def _count_rule(name: str, outcome: Outcome, words: str, explained: bool = False, cold: bool = False) -> Rule:
    """`explained`: the words say what those that got no first token waited behind (judge/waits.py). `cold`: they
    say when every such request was among a fresh engine's first (judge/cold_start.py)."""
    def rule(result: RunResult, spec: VerdictSpec) -> Finding | None:
        hits = [r for r in result.records if r.outcome is outcome]
        if not hits:
            return None
        first = min(hits, key=lambda r: r.end_ns)
        why = behind(result, hits) if explained else None
        since_s = cold_start_s(result, hits) if cold else None
        whose = sent_to(result, hits)
        facts: dict[str, int | float | str] = {
            "requests": len(hits), "first_request": first.id, "first_t_s": round(result.seconds(first.end_ns), 3),
            "waited_behind": why.why if why else "", "cancelled_before": why.cancelled if why else 0}
        if cold:
            facts["cold_start_s"] = -1.0 if since_s is None else since_s
        return Finding(name, Severity.FAIL, f"{len(hits)} {words} ({f'{whose}; ' if whose else ''}first: request "
                       f"{first.id} at {result.seconds(first.end_ns):.1f} s)" + (f"; {why.words}" if why else "") +
                       (f"; {cold_start_words(result, since_s)}" if since_s is not None else ""), facts)

    rule.__name__ = name
    rule.__doc__ = (f"Any request whose outcome is `{outcome}` ({words}); threshold: one.\n\nFacts: `requests`, "
                    "`first_request`, `first_t_s`, `waited_behind` (`held`: by requests loadrepro was not sending, "
                    "`queued`: behind its own, or empty), `cancelled_before` (held: the requests loadrepro had "
                    "cancelled before, which the engine seemed to keep running)" +
                    (", `cold_start_s` (every such request was sent within this many seconds of a fresh engine "
                     "becoming ready, or of the run's start against a target at a URL whose /metrics counted no "
                     f"finished request, before it answered any of the run's, at most {COLD_START_S:g}: the words "
                     "say a cold start may be the cause; -1: not so)" if cold else "") + ".")
    return rule


stalled_streams = _count_rule("stalled_streams", Outcome.STALLED, "streams stalled (no byte for stall_timeout_s)",
                              explained=True, cold=True)
truncated_streams = _count_rule("truncated_streams", Outcome.TRUNCATED, "streams or connections cut before a finish")
protocol_errors = _count_rule("protocol_errors", Outcome.PROTOCOL_ERROR, "responses were not valid OpenAI JSON/SSE")


def low_completion(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Fewer than `min_completed` of the admitted requests (all but rejected, throttled, cancelled and those failed
    during a fault on purpose) completed,
    or none completed at all (unless every request was cleanly rejected: correct for requests that never fit).
    Timeouts are explained when the engine's metrics or the records tell: what those without a first token waited
    behind (judge/waits.py), and the work queued ahead of the last of them against the time it had.

    Facts: `completed` of `admitted`, `timed_out`, `waited_behind` (`held`, `queued` or empty) and `timeouts`
    (`queueing`: behind busy slots, `unexplained`, or empty)."""
    counts = result.totals(spec.window_s).by_outcome
    total = sum(counts.values())
    admitted = total - sum(counts.get(o.value, 0) for o in UNADMITTED)
    ok = counts.get(Outcome.OK.value, 0)
    if total and counts.get(Outcome.REJECTED.value, 0) == total:
        return None  # every request refused cleanly at admission: the rejections rule judges that
    if not total or ok == 0:
        return Finding("low_completion", Severity.FAIL, "no request completed",
                       {"completed": 0, "admitted": admitted, "timed_out": counts.get(Outcome.TIMEOUT.value, 0),
                        "waited_behind": "", "timeouts": ""})
    if admitted and ok / admitted < spec.min_completed:
        timed_out = [r for r in result.records if r.outcome is Outcome.TIMEOUT]
        unanswered = [r for r in timed_out if r.first_token_ns is None]
        why = behind(result, unanswered)
        work = queue_work(result, timed_out)
        return Finding("low_completion", Severity.FAIL, f"{ok}/{admitted} admitted requests completed "
                       f"({ok / admitted:.0%}; at least {spec.min_completed:.0%} required)"
                       + (f"; the {len(unanswered)} that timed out without a first token: {why.words}" if why else "")
                       + (f"; of the {len(timed_out)} timed out: {work.words}" if work else ""),
                       {"completed": ok, "admitted": admitted, "timed_out": len(timed_out),
                        "waited_behind": why.why if why else "", "timeouts": work.why if work else ""})
    return None


def post_run_health(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """With `require_post_health`, /health must answer 200 right after the run.

    Facts: `status` (its answer, or `unreachable`), `process_ran` (1: a managed engine's process still ran: its
    frontend was unresponsive, not dead)."""
    post = result.post_health
    if not spec.require_post_health or post is None or post.healthy:
        return None
    ran = frontend_hung(result)
    hung = ", while the engine's process still ran: its HTTP frontend was unresponsive, not dead" if ran else ""
    return Finding("post_run_health", Severity.FAIL, f"/health {post.status} after the run{hung}",
                   {"status": post.status, "process_ran": int(ran)})


def interrupted(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """The run was interrupted (Ctrl-C or SIGTERM), or a load worker of loadrepro's crashed, before its workload
    finished: it proves nothing about the engine."""
    if result.stop_reason is StopReason.WORKER_CRASHED:
        return Finding("interrupted", Severity.FAIL, "a load worker crashed before the workload finished: "
                       "loadrepro's own failure, not the engine's, and the run proves nothing")
    if not result.interrupted:
        return None
    if result.stop_reason is StopReason.KILLED:
        return Finding("interrupted", Severity.FAIL, "the run's process was killed before its workload finished; "
                       "this report was rebuilt from what reached its files and is incomplete")
    return Finding("interrupted", Severity.FAIL, "the run was interrupted before its workload finished")


def pressure_in_metrics(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """KV pressure the engine reported and handled: preemptions, waiting requests, KV usage >= 90% (info).

    Facts: `preemptions`, `waiting_peak`, `kv_usage_peak` (each when the engine published it)."""
    preempted = measured.preemptions
    waiting, usage = series(result, "waiting"), series(result, "kv_usage")
    parts = []
    if preempted:
        parts.append(f"{preempted:.0f} preemptions")
    if waiting and max(waiting) > 0:
        parts.append(f"up to {max(waiting):.0f} requests waiting")
    if usage and max(usage) >= 0.9:
        parts.append(f"KV usage peaked at {max(usage):.0%}")
    if not parts:
        return None
    facts = {"preemptions": preempted or 0.0, "waiting_peak": max(waiting, default=0.0),
             "kv_usage_peak": max(usage, default=0.0)}
    return Finding("pressure_in_metrics", Severity.INFO, "pressure handled: " + ", ".join(parts),
                   {k: v for k, v in facts.items() if v})


def _unjudged(result: RunResult) -> bool:
    """The engine died or left service (what a dead engine's metrics still say is not requests it holds), or the
    run was interrupted (the requests it cancelled a moment ago may still be being freed)."""
    post = result.post_health
    return result.interrupted or result.stop_reason is StopReason.ENGINE_DEATH or \
        result.left_service or (post is not None and not post.healthy)


def zombie_requests(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """After the load, with none of loadrepro's requests in flight, the engine still reported requests running
    (its metrics, scraped after the load until nothing ran, for up to 5 s): requests it never freed, as after
    aborted streams. Needs the engine's running count; not judged once the engine died, nor after an interrupt.

    Facts: `running` (still reported), `after_s` (since loadrepro's last request ended), `cancelled_mid_stream`,
    `cancelled_whole`, `kv_usage` (-1: not published)."""
    totals = result.totals(spec.window_s)
    final = result.metrics[-1] if result.metrics else None
    running = final.values.get(RUNNING) if final else None
    if final is None or not running or final.t_ns <= totals.last_end_ns or _unjudged(result):
        return None
    cancelled = totals.by_outcome.get(Outcome.CANCELLED.value, 0)
    words = (f"the engine still reported {running:g} request{'' if running == 1 else 's'} running "
             f"{(final.t_ns - totals.last_end_ns) / 1e9:.1f} s after loadrepro's last request ended, with none of "
             "loadrepro's in flight: requests it never freed")
    whole = sum(1 for r in result.records if r.outcome is Outcome.CANCELLED and not r.streamed)
    if cancelled:
        ways = [f"{n} of loadrepro's requests had been cancelled {how}" for n, how in (
            (cancelled - whole, "mid-stream"), (whole, "while their whole answers were made")) if n]
        words += f" ({'; '.join(ways)})"
    if (kv := final.values.get(KV_USAGE)) is not None:
        words += f"; KV usage {kv:.1%} held"
    return Finding("zombie_requests", Severity.FAIL, words, {
        "running": running, "after_s": round((final.t_ns - totals.last_end_ns) / 1e9, 3),
        "cancelled_mid_stream": cancelled - whole, "cancelled_whole": whole, "kv_usage": -1.0 if kv is None else kv})


# A rule that reads what the judge measured of the run (judge/measurements.py), made once per judgement.
MeasuredRule = Callable[[RunResult, VerdictSpec, Measurements], Finding | None]


def _plain(rule: Rule) -> MeasuredRule:
    @functools.wraps(rule)
    def judged(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
        return rule(result, spec)
    return judged


def plain(*rules: Rule) -> tuple[MeasuredRule, ...]:
    """Rules that need nothing measured, taken as the others are."""
    return tuple(_plain(rule) for rule in rules)


def engine_memory_growth(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    return memory_growth(result, spec, measured.memory)


engine_memory_growth.__doc__ = memory_growth.__doc__


def spec_acceptance_collapse(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    return acceptance_collapse(measured.speculative, spec)


spec_acceptance_collapse.__doc__ = acceptance_collapse.__doc__

RULES: tuple[MeasuredRule, ...] = (
    *plain(engine_death), *DEPLOYMENT_RULES,
    *plain(failures_while_healthy, fatal_signature, stalled_streams, truncated_streams, protocol_errors,
           low_completion, post_run_health, interrupted, zombie_requests),
    no_recovery,
    *plain(bad_input_crash, capacity_mismatch, nothing_fit, prefix_reuse_missing, rejections, throttling),
    pressure_in_metrics,
    *plain(prompt_truncated, prompt_lengths), *ANSWER_RULES, *plain(*STRUCTURED_RULES, health_latency),
    liveness,
    *plain(wedged_while_healthy, frontend_unresponsive, introspection_unresponsive), engine_memory_growth,
    spec_acceptance_collapse,
    *SLO_RULES, *SOAK_RULES,
)


def classify(result: RunResult, spec: VerdictSpec, measured: Measurements) -> list[tuple[str, Finding | None]]:
    """Every rule's name with its finding (None: did not fire), in RULES order."""
    return [(rule.__name__, rule(result, spec, measured)) for rule in RULES]
