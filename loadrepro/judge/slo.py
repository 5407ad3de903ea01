"""Rule `slo`: the requests against [slo]'s limits, as judge/service_level.py measured them."""

from __future__ import annotations

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Finding, Severity
from loadrepro.judge.measurements import Measurements
from loadrepro.records import RunResult


def slo(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """Requests against [slo]'s limits (a failed request never meets them): FAIL when fewer than min_attainment
    met them, else information with the attainment and goodput. Judged in the steady state unless include_ramp_up.
    Requests loadrepro cancelled and those a fault on purpose failed are not judged."""
    found = measured.slo
    if found is None or found.attainment is None:
        return None
    required = result.slo.min_attainment
    if required > 0 and found.attainment < required:
        return Finding("slo", Severity.FAIL, f"{found.describe()}: below the {required:.1%} required")
    return Finding("slo", Severity.INFO, found.describe())


SLO_RULES = (slo,)
