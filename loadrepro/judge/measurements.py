"""What the judge measures of a run, once per judgement: its windows (and those while the load was started),
saturation found in them, the recovery from each fault on purpose, when a liveness probe would have restarted
the engine, the service level, the slow /health polls, the preemptions, each watched endpoint's health and each
replica's figures. The rules that need one take the judgement's `Measurements`, and the report reads the same
object (judge/judgement.py), so a number in the report is the number a rule judged by. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.endpoints import EndpointFigures, endpoint_health
from loadrepro.judge.memory import MemoryFigures, memory_figures
from loadrepro.judge.polls import Restart, slow_polls, usable_health, would_restart
from loadrepro.judge.recovery import Recovery, recoveries
from loadrepro.judge.replicas import ReplicaFigures, replica_figures
from loadrepro.judge.service_level import SloMeasure, slo_measure
from loadrepro.judge.speculative import SpecFigures, spec_figures
from loadrepro.judge.windows import Saturation, Window, load_windows, saturation, windows
from loadrepro.records import RunResult, Verification


@dataclass(frozen=True, slots=True)
class Measurements:
    windows: list[Window]  # the run's whole windows of [verdict] window_s
    load_windows: list[Window]  # of those, the ones that ended before the load's stop
    saturation: Saturation | None  # arrivals outpacing a steady service, in load_windows
    recoveries: list[Recovery] = field(default_factory=list)  # per fault on purpose, in the order caused
    restart: Restart | None = None  # when a liveness probe ([watch] liveness_*) would have restarted the engine
    slo: SloMeasure | None = None  # the requests against [slo] (None: no limit set)
    # The target's /health polls slower than [watch] health_timeout_s: a long run keeps every slow poll in memory
    # (load/recorder.py), so counting them there is counting all of them.
    slow_polls: int = 0
    preemptions: float | None = None  # during the run, from the engine's counter (None: it has none)
    endpoints: list[EndpointFigures] = field(default_factory=list)  # per [[watch.endpoints]], in the run's order
    replicas: list[ReplicaFigures] = field(default_factory=list)  # per replica, the target first (none: no replicas)
    answers: Verification = field(default_factory=Verification)  # [verify]'s, after the load (empty: none checked)
    memory: MemoryFigures | None = None  # of an engine loadrepro started (None: not read)
    speculative: SpecFigures | None = None  # drafts the engine reported per request (None: none)


def series(result: RunResult, name: str) -> list[float]:
    """One canonical metrics series over the run (load/watch/metrics_scrapes.py names them)."""
    return [s.values[name] for s in result.metrics if name in s.values]


def _preemptions(result: RunResult) -> float | None:
    """Preemptions (SGLang: retractions) during the run, from the engine's counter."""
    counts = series(result, "preemptions")
    return max(counts) - counts[0] if counts else None


def measure(result: RunResult, spec: VerdictSpec, answers: Verification | None = None) -> Measurements:
    """Everything the judge measures of `result` under `spec` (with the answers [verify] checked after it); made
    once per judgement (judge/judgement.py)."""
    found = windows(result, spec.window_s)
    loaded = load_windows(result, found)
    return Measurements(found, loaded, saturation(loaded), recoveries(result, spec),
                        would_restart(usable_health(result), result.watch), slo_measure(result, spec.window_s),
                        len(slow_polls(result.health, result.watch)), _preemptions(result),
                        [endpoint_health(result, w) for w in result.watched], replica_figures(result, spec.window_s),
                        answers or Verification(), memory_figures(result), spec_figures(result, spec.window_s))
