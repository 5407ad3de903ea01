"""RunResult + verdict -> RunReport: the numbers a report shows, computed once. Pure."""

from __future__ import annotations

import dataclasses
import platform
from collections import Counter

from ddsketch import DDSketch

from loadrepro.config.profile import Profile, VerdictSpec
from loadrepro.config.workload_spec import StructuredFormat
from loadrepro.judge.diagnose import request_signatures
from loadrepro.judge.endpoints import EndpointFigures
from loadrepro.judge.judgement import Judgement
from loadrepro.judge.measurements import Measurements, series
from loadrepro.judge.replicas import ReplicaFigures
from loadrepro.judge.signatures import SignatureClass
from loadrepro.records import (
    ANSWER_KINDS,
    FAILED,
    KV_USAGE,
    POOL_USAGE,
    WAITING,
    Outcome,
    RunResult,
    Tally,
    Verification,
    Watched,
    wrong_answers,
)
from loadrepro.records.redact import scrub
from loadrepro.report.agent_figures import agents_info
from loadrepro.report.engine_sections import memory_section, speculative_section
from loadrepro.schema.long_run_sections import (
    ChaosRow,
    EndpointHealth,
    EndpointInfo,
    EndpointTtft,
    Liveness,
    SloInfo,
    SloMissed,
    WatchedEndpointInfo,
    WindowRow,
)
from loadrepro.schema.report_sections import (
    Cache,
    CalibrationInfo,
    CanaryInfo,
    CapacityInfo,
    DiagnosisInfo,
    Environment,
    FirstFailure,
    Health,
    Latency,
    Lengths,
    OutputsInfo,
    Percentiles,
    PrefixReuse,
    Pressure,
    RequestRow,
    Requests,
    RuleResult,
    SignatureCount,
    StructuredInfo,
    Target,
    Throughput,
    TokenSpread,
    Transition,
    WorkersInfo,
    WorkloadInfo,
    WorstLength,
    WrongAnswer,
)
from loadrepro.schema.run_report import RunReport
from loadrepro.version import __version__
from loadrepro.workload.summary import WorkloadSummary

LOG_EXCERPT_LINES = 100
NOT_SENT_SHOWN = 10  # conversations named in the note of later turns not sent


def environment() -> Environment:
    return Environment(loadrepro_version=__version__, python=platform.python_version(), platform=platform.platform())


def _sketched(sketch: DDSketch) -> Percentiles:
    if not sketch.count:
        return Percentiles(count=0)
    return Percentiles(count=round(sketch.count), **{name: round(float(sketch.get_quantile_value(q) or 0.0), 3)
                                                     for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99),
                                                                     ("max", 1.0))})


def _latency(result: RunResult, window_s: float) -> Latency:
    t = result.totals(window_s)
    return Latency(ttft_ms=_sketched(t.ttft_ms), itl_ms=_sketched(t.itl_ms), e2e_ms=_sketched(t.e2e_ms),
                   queue_ms=_sketched(t.queue_ms), ttfc_ms=_sketched(t.ttfc_ms))


def _slo(result: RunResult, spec: VerdictSpec, measured: Measurements) -> SloInfo | None:
    m = measured.slo
    if m is None:
        return None
    whole = m.whole.met / m.whole.requests if m.whole.requests else None
    return SloInfo(limits_ms=m.limits, attainment=_r(m.attainment), requests=m.judged.requests, met=m.judged.met,
                   from_s=m.from_s, steady_state=m.steady, in_flight_level=m.level,
                   goodput_requests_per_s=round(m.goodput_requests_per_s, 3),
                   goodput_tokens_per_s=round(m.goodput_tokens_per_s, 3), missed=SloMissed(**m.judged.missed),
                   whole_run_attainment=_r(whole),
                   client_queue_p95_ms=_sketched(result.totals(spec.window_s).queue_ms).p95)


def _structured(t: Tally, asked: list[StructuredFormat]) -> StructuredInfo | None:
    if not t.structured and not t.structured_refused:
        return None
    request, words = t.first_unparsed or (None, None)
    refused, refusal = t.first_refused or (None, None)
    return StructuredInfo(format=", ".join(asked), answers=t.structured, cut=t.structured_cut,
                          unchecked=t.structured_unchecked, unparsed=t.structured_unparsed,
                          first_unparsed_request=request, first_unparsed=words, refused=t.structured_refused,
                          first_refused_request=refused, first_refusal=refusal)


def _watched(w: Watched, e: EndpointFigures) -> WatchedEndpointInfo:
    return WatchedEndpointInfo(name=w.name, health_url=w.health_url, metrics_url=w.metrics_url, polls=e.polls,
                               not_ok=e.not_ok, died_at_s=None if e.died_s is None else round(e.died_s, 3),
                               kv_usage_peak=e.kv_usage_peak, waiting_peak=e.waiting_peak)


def _endpoint(f: ReplicaFigures) -> EndpointInfo:
    ttft = _sketched(f.tally.ttft_ms)
    return EndpointInfo(name=f.name, url=f.url, requests=f.tally.requests, by_outcome=dict(f.tally.by_outcome),
                        ttft_ms=EndpointTtft(p50=ttft.p50, p95=ttft.p95),
                        health=EndpointHealth(pre=f.pre, post=f.post, slow=f.slow),
                        died_at_s=None if f.died_s is None else round(f.died_s, 3))


def _r(share: float | None) -> float | None:
    return round(share, 5) if share is not None else None


def _health(result: RunResult, window_s: float, slow: int) -> Health:
    transitions: list[Transition] = []
    for sample in [*result.health, *([result.post_health] if result.post_health else [])]:
        if not transitions or transitions[-1].status != sample.status:
            transitions.append(Transition(t_s=round(result.seconds(sample.t_ns), 3), status=sample.status))
    return Health(pre=result.health[0].status if result.health else None,
                  post=result.post_health.status if result.post_health else None, transitions=transitions,
                  path=result.watch.health_path, latency_ms=_sketched(result.totals(window_s).health_ms), slow=slow,
                  owner=result.health_owner)


def _outputs(answers: Verification) -> OutputsInfo | None:
    if not answers.checks:
        return None
    counts = Counter(c.kind for c in answers.checks)
    wrong = wrong_answers(answers.checks)[:20]
    ties = [c.margin for c in answers.checks if c.kind == "near_tie" and c.margin is not None]
    v = answers.spec
    return OutputsInfo(mode=v.outputs, checked=len(answers.checks), compare_tokens=v.compare_tokens,
                       min_margin=v.min_margin, near_tie_margin_max=max(ties) if ties else None,
                       worst=[WrongAnswer.model_validate(dataclasses.asdict(c)) for c in wrong],
                       **{kind: counts.get(kind, 0) for kind in ANSWER_KINDS})


def _chaos(result: RunResult, measured: Measurements) -> list[ChaosRow]:
    return [ChaosRow.model_validate(r, from_attributes=True).model_copy(update={"detail": scrub(r.detail)})
            for r in measured.recoveries] + [
        ChaosRow(at_s=f.at_s, action=f.action, done_s=f.at_s, recovered=None, recovery_s=None, recover_within_s=0.0,
                 health_s=None, ttft_s=None, running_s=None, before_ttft_p95_ms=None, before_running=None,
                 before_kv_usage=None, kv_s=None, after_kv_usage=None, faulted=0,
                 detail=f"never caused: {f.why}") for f in result.not_caused]


def _canary(result: RunResult, window_s: float) -> CanaryInfo | None:
    t = result.totals(window_s)
    if not t.canaries:
        return None
    return CanaryInfo(sent=t.canaries, ok=t.canary_outcomes.get(Outcome.OK.value, 0),
                      ttft_ms=_sketched(t.canary_ttft_ms), by_outcome=dict(sorted(t.canary_outcomes.items())))


def _liveness(result: RunResult, measured: Measurements) -> Liveness | None:
    if not result.health:
        return None
    w = result.watch
    restart = measured.restart
    return Liveness(timeout_s=w.liveness_timeout_s, period_s=w.liveness_period_s, failures=w.liveness_failures,
                    would_restart_at_s=round(result.seconds(restart.t_ns), 3) if restart else None)


def _first_failure(result: RunResult) -> FirstFailure | None:
    failed = [r for r in result.records if r.outcome in FAILED]
    if not failed:
        return None
    r = min(failed, key=lambda r: r.end_ns)
    return FirstFailure(t_s=round(result.seconds(r.end_ns), 3), request=r.id, outcome=r.outcome.value,
                        detail=r.detail, conversation=r.conversation, turn=r.turn, status=r.status)


def _first_fatal_line(result: RunResult) -> list[str]:
    """The first fatal line of the log the run's log context came from: the target's, else the first replica's
    that had one (the runner's choice)."""
    fatal = [m for m in result.log_matches if m.klass == SignatureClass.FATAL.value]
    first = min((m.replica for m in fatal), default=0)
    return [m.line for m in fatal if m.replica == first][:1]


def _signatures(result: RunResult) -> list[SignatureCount]:
    seen: dict[str, list[tuple[int, str, str]]] = {}
    for m in result.log_matches:
        seen.setdefault(m.signature, []).append((m.t_ns, m.line, m.klass))
    for r in result.records:
        if r.signature:
            seen.setdefault(r.signature, []).append((r.end_ns, r.detail, r.signature_class or "F"))
    requests, failed = request_signatures((r.signature, r.outcome.value) for r in result.records)
    rows = []
    for name, hits in seen.items():
        t_ns, sample, k = min(hits)
        rows.append(SignatureCount(name=name, class_=k, count=len(hits), requests=requests.get(name, 0),
                                   failed_requests=failed.get(name, 0), log_lines=len(hits) - requests.get(name, 0),
                                   first_t_s=round(result.seconds(t_ns), 3), sample=sample[:500]))
    return sorted(rows, key=lambda s: s.first_t_s)


def _peak(result: RunResult, name: str) -> float | None:
    values = series(result, name)
    return max(values) if values else None


def _pool_peaks(result: RunResult) -> dict[str, float]:
    peaks: dict[str, float] = {}
    for sample in result.metrics:
        for key, share in sample.values.items():
            if key.startswith(POOL_USAGE):
                pool = key[len(POOL_USAGE):]
                peaks[pool] = max(peaks.get(pool, 0.0), round(share, 4))
    return peaks


def _prefix_reuse(totals: Tally) -> PrefixReuse:
    possible, cached = totals.reuse_possible, totals.reuse_cached
    ratio = round(cached / possible, 4) if cached is not None and possible else None
    return PrefixReuse(possible_tokens=possible, cached_tokens=cached, ratio=ratio, own_tokens=totals.reuse_own)


def _pressure(result: RunResult, measured: Measurements) -> Pressure:
    return Pressure(kv_usage_peak=_peak(result, KV_USAGE), waiting_peak=_peak(result, WAITING),
                    preemptions=measured.preemptions, pool_usage_peak=_pool_peaks(result))


def _capacity(result: RunResult, totals: Tally) -> CapacityInfo | None:
    limits = result.limits
    if limits is None:
        return None
    table = totals.capacity.outcomes if totals.capacity is not None else {}  # every request, kept or not
    return CapacityInfo(source=limits.source, tokens_per_block=limits.tokens_per_block, pool_tokens=limits.pool_tokens,
                        draft_pool_tokens=limits.draft_pool_tokens, index_entries=limits.index_entries,
                        max_seq_len=limits.max_seq_len, beam_width=limits.beam_width,
                        outcomes_by_prediction={k: dict(sorted(v.items())) for k, v in sorted(table.items())})


def _lengths(result: RunResult, window_s: float) -> Lengths:
    errors = result.totals(window_s).prompt_errors
    w = errors.worst
    if w is None:
        return Lengths(requests=0, error_p50=None, error_p95=None, error_max=None, bias=None, worst=None)
    return Lengths(requests=errors.count, error_p50=round(errors.percentile(50), 5),
                   error_p95=round(errors.percentile(95), 5), error_max=round(abs(w.error), 5),
                   bias=round(errors.total / errors.count, 5),
                   worst=WorstLength(request=w.request, conversation=w.conversation, turn=w.turn, planned=w.planned,
                                     measured=w.measured))


def _rows(result: RunResult, checked: Verification) -> list[RequestRow]:
    predicted = {(p.conversation, p.turn): p for p in result.predictions}
    answers = {c.request: c.kind for c in checked.checks}
    rows = []
    for r in sorted(result.records, key=lambda r: r.id):
        p = predicted.get((r.conversation, r.turn))
        rows.append(RequestRow(id=r.id, conversation=r.conversation, turn=r.turn, outcome=r.outcome.value,
                               status=r.status, ttft_ms=_round(r.ttft_ms), e2e_ms=_round(r.e2e_ms),
                               output_tokens=r.completion_tokens if r.completion_tokens is not None else (
                                   len(r.chunk_ns) if r.chunk_ns else None),
                               cached_tokens=r.cached_tokens, shared_prefix_tokens=r.shared_prefix_tokens,
                               prediction=p.fit.value if p else None, limit=p.limit if p else "",
                               ttfc_ms=_round(r.ttfc_ms), answer=answers.get(r.id)))
    return rows


def _round(ms: float | None) -> float | None:
    return round(ms, 3) if ms is not None else None


MAX_ROWS = 4000  # request_table rows kept in report.json: a soak's every request would make it hundreds of MB


def _kept(rows: list[RequestRow]) -> list[RequestRow]:
    """All rows of a run up to MAX_ROWS; beyond, the failed ones first (up to half), then the first and the last
    of the rest, in id order."""
    if len(rows) <= MAX_ROWS:
        return rows
    failed = [r for r in rows if r.outcome != "ok"][:MAX_ROWS // 2]
    rest = [r for r in rows if r.outcome == "ok"]
    room = (MAX_ROWS - len(failed)) // 2
    return sorted(failed + rest[:room] + rest[-room:], key=lambda r: r.id)


def _workers_note(result: RunResult) -> list[str]:
    if result.backend == "in-process":
        return []
    what = "Ray actors" if result.backend == "ray" else "worker processes"
    return [f"load: sent by {result.workers} {what} (conversation i on worker i mod {result.workers}), "
            f"their records merged here on one time axis"]


def _kept_note(result: RunResult) -> list[str]:
    if result.tally is None or not result.tally.dropped:
        return []
    return [f"records: {result.tally.dropped:,} of {result.tally.requests:,} completed requests were counted but not "
            "kept in memory ([load] keep_records): totals, latency, prefix reuse, prompt lengths and engine death "
            "cover every request as in any run; the timeline's request lanes and latency histograms draw the kept "
            "records; requests.jsonl has every one"]


def _not_sent(totals: Tally, workload: WorkloadSummary) -> tuple[int, list[int]]:
    """How many planned later turns were not sent because the turn before them did not answer (a conversation goes
    on only from an answer: load/arrivals.py), and the conversations they were of."""
    planned = dict(workload.turns)
    cut = {(c, t): n * (planned[c] - t) for (c, t), n in totals.ended_early.items() if planned.get(c, 0) > t}
    return sum(cut.values()), sorted({c for c, _ in cut})


def _not_sent_note(totals: Tally, workload: WorkloadSummary) -> list[str]:
    count, conversations = _not_sent(totals, workload)
    if not count:
        return []
    shown = ", ".join(str(c) for c in conversations[:NOT_SENT_SHOWN]) + (", ..." if len(conversations) >
                                                                          NOT_SENT_SHOWN else "")
    return [f"run: {count} later turn{'s' * (count > 1)} not sent: the turn before them failed or was refused, and "
            f"a conversation goes on only from an answer (conversation{'s' * (len(conversations) > 1)} {shown})"]


def _windows(measured: Measurements) -> list[WindowRow]:
    return [WindowRow(**dataclasses.asdict(w)) for w in measured.windows]


def build_report(result: RunResult, profile: Profile, judgement: Judgement, workload: WorkloadSummary, command: str,
                 env: Environment | None = None, extra_notes: list[str] | None = None,
                 diagnosis: DiagnosisInfo | None = None) -> RunReport:
    """The report of `result` as `judgement` judged it: its figures of what the judge measured are the judgement's
    own, read, never measured again."""
    verdict, measured = judgement.verdict, judgement.measurements
    duration = max((result.end_ns - result.start_ns) / 1e9, 1e-9)
    rows = _rows(result, measured.answers)
    totals, kept = result.totals(profile.verdict.window_s), _kept(rows)
    return RunReport(
        verdict=verdict.status, reasons=list(verdict.reasons), label=result.label,
        profile=profile.model_dump(mode="json", by_alias=True), seed=result.seed,
        target=Target(base_url=scrub(result.base_url), model=result.model,
                      engine_cmd=scrub(result.engine_cmd) if result.engine_cmd else None),
        started_at=result.started_at, duration_s=round(duration, 3), command=scrub(command),
        stop_reason=result.stop_reason, interrupted=result.interrupted,
        requests=Requests(total=totals.requests, by_outcome=dict(sorted(totals.by_outcome.items())),
                          reconnects=totals.reconnects, conversations=totals.conversations,
                          later_turns_not_sent=_not_sent(totals, workload)[0]),
        health=_health(result, profile.verdict.window_s, measured.slow_polls), first_failure=_first_failure(result),
        signatures=_signatures(result),
        rules=[RuleResult(name=name, fired=f is not None, severity=f.severity if f else None,
                          detail=f.summary if f else "", facts=dict(f.facts) if f else {})
               for name, f in judgement.findings],
        latency=_latency(result, profile.verdict.window_s),
        throughput=Throughput(requests_per_s=round(totals.by_outcome.get("ok", 0) / duration, 3),
                              output_tokens_per_s=round(totals.output_tokens / duration, 3)),
        cache=Cache(prompt_tokens=totals.prompt_tokens, cached_tokens=totals.cached_tokens),
        workload=WorkloadInfo(kind=workload.kind, conversations=workload.conversations, requests=workload.requests,
                              prompt_tokens=TokenSpread(p50=workload.prompt_tokens_p50, p95=workload.prompt_tokens_p95,
                                                        max=workload.prompt_tokens_max),
                              seed=workload.seed, faker_version=workload.faker_version,
                              calibration_source=workload.calibration_source, origin=workload.origin,
                              prefix_reuse=_prefix_reuse(totals)),
        pressure=_pressure(result, measured), capacity=_capacity(result, totals), diagnosis=diagnosis,
        calibration=CalibrationInfo(source=workload.calibration_source, probe_requests=workload.probe_requests,
                                    probe_tokens=workload.probe_tokens),
        lengths=_lengths(result, profile.verdict.window_s),
        workers=WorkersInfo(count=result.workers, backend=result.backend), liveness=_liveness(result, measured),
        canary=_canary(result, profile.verdict.window_s), outputs=_outputs(measured.answers),
        chaos=_chaos(result, measured),
        log_excerpt=list(result.log_context[-LOG_EXCERPT_LINES:]) + _first_fatal_line(result),
        notes=[scrub(n) for n in (*(extra_notes or []), *(f"{n.source}: {n.text}" for n in result.notes),
                                  *_kept_note(result), *_workers_note(result), *_not_sent_note(totals, workload))],
        environment=env or environment(), windows=_windows(measured),
        slo=_slo(result, profile.verdict, measured),
        watched_endpoints=[_watched(w, e) for w, e in zip(result.watched, measured.endpoints)],
        endpoints=[_endpoint(f) for f in measured.replicas],
        structured_outputs=_structured(totals, profile.workload.structured_formats),
        agents=agents_info(result.records, workload.trees), engine_memory=memory_section(measured.memory),
        speculative=speculative_section(measured.speculative),
        request_table=kept, request_table_total=totals.requests if totals.requests > len(kept) else None,
        finished=verdict.status != "running")
