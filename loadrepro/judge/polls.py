"""The health polls as a liveness probe would have read them: those outside faults on purpose, and the first moment
a probe with the deployment's timeout, period and failure threshold would have restarted the engine. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from loadrepro.profile import WatchSpec
from loadrepro.records import HealthSample, RunResult


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


@dataclass(frozen=True, slots=True)
class Restart:
    t_ns: int  # when the probe's last failure would have been known
    first_ns: int  # when the failing stretch began (its first poll was sent)
    probes: int  # polls of ours in that stretch


def sent(poll: HealthSample) -> int:
    return poll.t_ns - poll.latency_ns


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
