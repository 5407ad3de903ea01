"""Rule `slo`: the requests against [slo]'s limits, as judge/service_level.py measured them."""

from __future__ import annotations

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Finding, Severity
from loadrepro.judge.measurements import measure
from loadrepro.records import RunResult


def slo(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Requests against [slo]'s limits (a failed request never meets them): FAIL when fewer than min_attainment
    met them, else information with the attainment and goodput. Judged in the steady state unless include_ramp_up.
    Requests loadrepro cancelled and those a fault on purpose failed are not judged."""
    measured = measure(result, spec).slo
    if measured is None or measured.attainment is None:
        return None
    required = result.slo.min_attainment
    if required > 0 and measured.attainment < required:
        return Finding("slo", Severity.FAIL, f"{measured.describe()}: below the {required:.1%} required")
    return Finding("slo", Severity.INFO, measured.describe())


SLO_RULES = (slo,)
