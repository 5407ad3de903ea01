"""The health polls as a liveness probe would have read them: those outside faults on purpose, and the first moment
a probe with the deployment's timeout, period and failure threshold would have restarted the engine. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from loadrepro.config.profile import WatchSpec
from loadrepro.records import HealthSample, Note, NoteSource, RunResult


def outside_outages(result: RunResult, spans: list[tuple[int, int]]) -> list[int]:
    """The indexes of the (start, end) spans that overlap no fault that stopped the engine on purpose (from the
    fault to /health 200 again): a silent or slow engine then is the fault's doing, not the engine's."""
    faults = result.fault_spans
    return [i for i, (start, end) in enumerate(spans) if not faults.overlaps(start, end)]


def polls_outside_faults(result: RunResult) -> list[HealthSample]:
    """The health samples outside faults on purpose."""
    polls = list(result.health)
    return [polls[i] for i in outside_outages(result, [(sent(h), h.t_ns) for h in polls])]


def usable_health(result: RunResult) -> list[HealthSample]:
    """The run's health samples (outside faults on purpose), if /health answered 200 before the run (else it
    says nothing of the engine)."""
    return polls_outside_faults(result) if result.health and result.health[0].healthy else []


def _last_word(result: RunResult) -> HealthSample | None:
    """When the post-run poll is not 200: the first poll of the run's final stretch of non-200 polls (the engine
    died at the end, or with nothing left to fail) sent after the engine's last progress: a poll that went
    unanswered while tokens still came was a starved frontend, not yet a dead engine."""
    health, post = usable_health(result), result.post_health
    if not health or post is None or post.healthy or frontend_hung(result):
        return None
    polls = health + [post]
    i = len(polls) - 1
    while i > 0 and not polls[i - 1].healthy:
        i -= 1
    while i < len(polls) - 1 and polls[i].t_ns - polls[i].latency_ns < result.progress_ns:
        i += 1
    return polls[i]


def frontend_hung(result: RunResult) -> bool:
    """/health got no answer after the run while the engine's process (one loadrepro started) still ran: its HTTP
    frontend was unresponsive, not dead (llama.cpp's threads all held by requests loadrepro had cancelled)."""
    post = result.post_health
    return post is not None and post.status == "unreachable" and bool(result.engine_running)


def left_service(result: RunResult) -> tuple[int, Note | None] | None:
    """When the target left service, if it did, and the note that said so: the runner's judgement while the load
    went on (judge/death.py), its process's exit, or /health not 200 after the run (the run's last word), whichever
    came first. The one answer engine_death and the replicas' figures give."""
    judged, exited = result.noted(NoteSource.DEATH), result.noted(NoteSource.ENGINE)
    last = _last_word(result)
    times = [x.t_ns for x in (judged, exited, last) if x is not None]
    return (min(times), exited or judged) if times else None


@dataclass(frozen=True, slots=True)
class Restart:
    t_ns: int  # when the probe's last failure would have been known
    first_ns: int  # when the failing stretch began (its first poll was sent)
    probes: int  # polls of ours in that stretch


def sent(poll: HealthSample) -> int:
    return poll.t_ns - poll.latency_ns


def slow_polls(polls: Iterable[HealthSample], watch: WatchSpec) -> list[HealthSample]:
    """The polls that took longer than [watch] health_timeout_s to answer (or to be given up)."""
    return [h for h in polls if h.latency_ns > watch.health_timeout_s * 1e9]


def failed(sample: HealthSample, timeout_ns: float) -> bool:
    return not sample.healthy or sample.latency_ns > timeout_ns


def would_restart(polls: list[HealthSample], watch: WatchSpec) -> Restart | None:
    """The first moment a liveness probe would have restarted the engine: `liveness_failures` of our polls in a row
    failed its test, spanning at least (failures - 1) probe periods, so that every probe in that span would have
    failed too. Our polls come more often than an orchestrator's probes, never less."""
    timeout_ns = watch.liveness_timeout_s * 1e9
    span_ns = (watch.liveness_failures - 1) * watch.liveness_period_s * 1e9
    first: HealthSample | None = None
    count = 0
    for poll in polls:
        if not failed(poll, timeout_ns):
            first, count = None, 0
            continue
        first = first or poll
        count += 1
        if count >= watch.liveness_failures and sent(poll) - sent(first) >= span_ns:
            return Restart(sent(poll) + int(min(poll.latency_ns, timeout_ns)), sent(first), count)
    return None
