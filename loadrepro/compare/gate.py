"""A regression gate for a nightly job: RUN against BASELINE (two runs of one workload). It closes when RUN is
significantly worse on a gated figure by more than the tolerance, or a rule fails in RUN that did not fail in
BASELINE. Latency is the comparison's own (compare/comparison.py): each figure over the requests both runs completed,
with its bootstrap 95% interval; the SLO's attainment, a share of requests, by a one-sided Fisher exact test. A
change inside the interval, or smaller than the tolerance, never closes it. Pure."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from loadrepro.compare.comparison import METRICS, LatencyChange, Runs, latency_changes, within_noise
from loadrepro.compare.trials import Rate, p_value
from loadrepro.schema.report_kinds import Severity
from loadrepro.schema.run_report import RunReport

GATE_ALPHA = 0.05  # the attainment's one-sided test: RUN missed the SLO more often than BASELINE with p below this
GATED = {name for name, *_ in METRICS}  # TTFT p50 and p95, ITL p50, each request's decode tokens/s
# Changes within compare's noise (what differs between the halves of one run, or between the runs of a side, and
# a floor of the client's own timing) never close the gate: see compare/comparison.py.


class GateCheck(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    figure: str = Field(description="What is compared (a latency figure over the requests both completed, the "
                        "SLO's attainment, or a rule).")
    baseline: str = Field(description="Its value in BASELINE.")
    run: str = Field(description="Its value in RUN.")
    change: str = Field(description="RUN against BASELINE, with its 95% interval or test.")
    closed: bool = Field(description="This figure closes the gate.")


class Gate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: str = "loadrepro.compare.gate/1"
    passed: bool = Field(description="No figure closed the gate.")
    tolerance: float = Field(description="A change smaller than this share of BASELINE's value never closes it.")
    detail: str = Field(description="What closed the gate, or that nothing did.")
    checks: list[GateCheck] = Field(description="Each figure gated.")


def _latency_check(c: LatencyChange, tolerance: float) -> GateCheck:
    higher_is_better = next(h for name, _, _, h in METRICS if name == c.metric)
    if c.ci95 is None or c.difference is None or c.stock is None or c.patched is None:
        return GateCheck(figure=c.metric, baseline=_num(c.stock), run=_num(c.patched), change=c.verdict,
                         closed=False)
    lo, hi = c.ci95
    within = within_noise(c)
    worse = (hi < 0 if higher_is_better else lo > 0) and abs(c.difference) > tolerance * abs(c.stock) and not within
    share = c.difference / c.stock if c.stock else 0.0
    noise = f"; {within}" if within else ""
    return GateCheck(figure=c.metric, baseline=_num(c.stock), run=_num(c.patched),
                     change=f"{share:+.1%} ({c.difference:+,.2f} [{lo:+,.2f}, {hi:+,.2f}]){noise}", closed=worse)


def _num(value: float | None) -> str:
    """One decimal, or three significant digits below 10 (a gap between tokens of 0.04 ms is not 0.0)."""
    return "-" if value is None else f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


def _attainment_check(baseline: RunReport, run: RunReport, tolerance: float) -> GateCheck | None:
    a, b = baseline.slo, run.slo
    if a is None or b is None or not a.requests or not b.requests or a.attainment is None or b.attainment is None:
        return None
    p = p_value(Rate(b.requests - b.met, b.requests, (0.0, 1.0)), Rate(a.requests - a.met, a.requests, (0.0, 1.0)))
    drop = a.attainment - b.attainment
    closed = p < GATE_ALPHA and drop > tolerance * a.attainment
    return GateCheck(figure="SLO attainment (goodput's share of requests)", baseline=f"{a.attainment:.1%}",
                     run=f"{b.attainment:.1%}", change=f"{-drop:+.1%} points (one-sided Fisher exact p = {p:.3g})",
                     closed=closed)


def _failing(report: RunReport) -> set[str]:
    return {r.name for r in report.rules if r.fired and r.severity == Severity.FAIL}


def gate(baseline: RunReport, run: RunReport, tolerance: float = 0.05,
         runs: tuple[Runs, Runs] | None = None) -> Gate:
    """RUN against BASELINE; `runs`: each side's request rows (every trial's), default each report's table."""
    changes = latency_changes(*(runs or ([baseline.request_table], [run.request_table])))
    checks = [_latency_check(c, tolerance) for c in changes if c.metric in GATED]
    if (attainment := _attainment_check(baseline, run, tolerance)) is not None:
        checks.append(attainment)
    before = _failing(baseline)
    checks += [GateCheck(figure=f"rule {name}", baseline="did not fail" if name not in before else "failed",
                         run="failed", change="fails in RUN only" if name not in before else "failed in both",
                         closed=name not in before) for name in sorted(_failing(run))]
    closed = [c for c in checks if c.closed]
    detail = ("closed by " + "; ".join(f"{c.figure}: {c.baseline} -> {c.run} ({c.change})" for c in closed)
              if closed else f"open: no gated figure significantly worse by more than {tolerance:.0%}, and no rule "
                             "fails that did not fail in BASELINE")
    return Gate(passed=not closed, tolerance=tolerance, detail=detail, checks=checks)
