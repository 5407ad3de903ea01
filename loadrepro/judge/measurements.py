"""What the judge measures of a run, once per judgement: its windows (and those while the load was started),
saturation found in them, the recovery from each fault on purpose, when a liveness probe would have restarted
the engine, and the service level. The rules (judge/soak.py) and the report
(report/build.py) read the same object, so a number in the report is the number a rule judged by. Pure."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.polls import Restart, usable_health, would_restart
from loadrepro.judge.recovery import Recovery, recoveries
from loadrepro.judge.service_level import SloMeasure, slo_measure
from loadrepro.judge.windows import Saturation, Window, load_windows, saturation, windows
from loadrepro.records import RunResult


@dataclass(frozen=True, slots=True)
class Measurements:
    windows: list[Window]  # the run's whole windows of [verdict] window_s
    load_windows: list[Window]  # of those, the ones that ended before the load's stop
    saturation: Saturation | None  # arrivals outpacing a steady service, in load_windows
    recoveries: list[Recovery] = field(default_factory=list)  # per fault on purpose, in the order caused
    restart: Restart | None = None  # when a liveness probe ([watch] liveness_*) would have restarted the engine
    slo: SloMeasure | None = None  # the requests against [slo] (None: no limit set)


def _measured(result: RunResult, spec: VerdictSpec) -> Measurements:
    found = windows(result, spec.window_s)
    loaded = load_windows(result, found)
    return Measurements(found, loaded, saturation(loaded), recoveries(result, spec),
                        would_restart(usable_health(result), result.watch), slo_measure(result, spec.window_s))


class _Last(threading.local):
    """The last judgement's measurements, per thread (a checkpoint is judged on a worker thread)."""

    result: RunResult | None = None
    spec: VerdictSpec | None = None
    measured: Measurements | None = None


_last = _Last()


def measure(result: RunResult, spec: VerdictSpec) -> Measurements:
    """The measurements of `result` under `spec`, made once for the rules and the report that judge and report
    the same result one after the other (the same objects: results are immutable)."""
    if _last.result is not result or _last.spec is not spec or _last.measured is None:
        _last.result, _last.spec, _last.measured = result, spec, _measured(result, spec)
    return _last.measured
