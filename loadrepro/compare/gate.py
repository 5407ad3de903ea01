"""A regression gate for a nightly job: RUN against BASELINE (two runs of one workload). It closes when RUN is
significantly worse on a gated figure by more than the tolerance and beyond the noise between runs, or a rule fails
in RUN that did not fail in BASELINE. Latency is the comparison's own (compare/comparison.py): each figure over the
requests both runs completed, with its bootstrap 95% interval; the SLO's attainment, a share of requests, by a
one-sided Fisher exact test. A change inside the interval, or smaller than the tolerance, never closes it.

Two runs of one unchanged engine differ by more than the halves of one run do (a nightly TTFT p50 read +12% one
night and -41% the next), so a latency figure closes the gate only where the noise between runs is known:

- from trials, several runs a side: the gap between a side's runs (compare/comparison.py's noise);
- from a history of earlier runs of the workload (a nightly job's earlier nights): a change no larger than two
  runs of one engine differ by at 95%, estimated from the spread of their figures (Student's t), stays open.

With one run a side and no history, the gate cannot tell a latency change from the noise between runs; it says so
and only the SLO's attainment and the rules can close it. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadrepro.compare.comparison import METRICS, LatencyChange, Runs, latency_changes, within_noise
from loadrepro.compare.trials import Rate, p_value
from loadrepro.schema.report_kinds import Severity
from loadrepro.schema.report_sections import RequestRow
from loadrepro.schema.run_report import RunReport

GATE_ALPHA = 0.05  # the attainment's one-sided test: RUN missed the SLO more often than BASELINE with p below this
GATED = {name for name, *_ in METRICS}  # TTFT p50 and p95, ITL p50, each request's decode tokens/s
MIN_HISTORY = 3  # earlier runs needed to estimate the noise between runs from their spread
# Changes within compare's noise (what differs between the halves of one run, or between the runs of a side, and
# a floor of the client's own timing) never close the gate: see compare/comparison.py.
CANNOT_TELL = ("one run a side cannot tell a change from the noise between runs: give each side --trials, or "
               "--history of earlier runs")


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
    between_runs: str = Field("", description=(
        "Where the noise between two runs of one engine came from: each side's trials, the earlier runs of "
        "--history, or nowhere (one run a side: no latency figure can close the gate)."))


class History(BaseModel):
    """Earlier runs of the gated workload (a nightly job's earlier nights): each gated figure over each run's
    completed requests."""
    model_config = ConfigDict(frozen=True, extra="forbid")
    runs: int = Field(description="Earlier runs of the workload read.")
    figures: dict[str, list[float]] = Field(description="Each gated figure, run by run.")

    def noise(self, metric: str) -> float | None:
        """How far apart two runs of the unchanged engine may land, at 95%: the difference of two runs has the
        standard deviation of one times sqrt(2), that one estimated from the earlier runs' spread (Student's t,
        their count less one degrees of freedom). None below MIN_HISTORY runs with the figure."""
        values = self.figures.get(metric, [])
        if len(values) < MIN_HISTORY:
            return None
        from scipy import stats  # here, not at import: only a gate with a history uses it

        k = len(values)
        return float(stats.t.ppf(0.975, k - 1) * np.std(values, ddof=1) * math.sqrt(2))


def history_of(runs: Sequence[Sequence[RequestRow]]) -> History:
    """Each gated figure of each earlier run (its completed requests)."""
    figures: dict[str, list[float]] = {}
    for rows in runs:
        for name, read, q, _ in METRICS:
            values = [x for r in rows if r.outcome == "ok" and (x := read(r)) is not None]
            if values:
                figures.setdefault(name, []).append(round(float(np.percentile(values, q)), 3))
    return History(runs=len(runs), figures=figures)


def _latency_check(c: LatencyChange, tolerance: float, trials: bool, history: History | None) -> GateCheck:
    """`trials`: several runs a side, so c.noise is the gap between runs; `history`: earlier runs' figures."""
    higher_is_better = next(h for name, _, _, h in METRICS if name == c.metric)
    if c.ci95 is None or c.difference is None or c.stock is None or c.patched is None:
        return GateCheck(figure=c.metric, baseline=_num(c.stock), run=_num(c.patched), change=c.verdict,
                         closed=False)
    lo, hi = c.ci95
    significant = (hi < 0 if higher_is_better else lo > 0) and abs(c.difference) > tolerance * abs(c.stock)
    within = _within_history(c, history) or within_noise(c)
    if significant and within is None and not trials and (history is None or history.noise(c.metric) is None):
        within = CANNOT_TELL
    worse = significant and not within
    share = c.difference / c.stock if c.stock else 0.0
    noise = f"; {within}" if within else ""
    return GateCheck(figure=c.metric, baseline=_num(c.stock), run=_num(c.patched),
                     change=f"{share:+.1%} ({c.difference:+,.2f} [{lo:+,.2f}, {hi:+,.2f}]){noise}", closed=worse)


def _within_history(c: LatencyChange, history: History | None) -> str | None:
    """Why `c`'s change is one the earlier runs showed without a change, or None."""
    noise = None if history is None else history.noise(c.metric)
    if noise is None or c.difference is None or abs(c.difference) > noise:
        return None
    assert history is not None
    return (f"within the noise between the {len(history.figures[c.metric])} earlier runs of the history "
            f"(±{noise:,.2f})")


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


def _between_runs(runs: tuple[Runs, Runs], history: History | None) -> str:
    said = []
    if min(len(side) for side in runs) > 1:
        said.append(f"the gap between each side's trials ({len(runs[0])} and {len(runs[1])})")
    if history is not None:
        usable = max((len(v) for v in history.figures.values()), default=0)
        said.append(f"the spread of {usable} earlier runs (--history)" if usable >= MIN_HISTORY else
                    f"none from --history: {usable} earlier run(s) of this workload, fewer than {MIN_HISTORY}")
    elif not said:
        said.append("none: one run a side, and no --history")
    return "; ".join(said)


def gate(baseline: RunReport, run: RunReport, tolerance: float = 0.05,
         runs: tuple[Runs, Runs] | None = None, history: History | None = None) -> Gate:
    """RUN against BASELINE; `runs`: each side's request rows (every trial's), default each report's table;
    `history`: the figures of earlier runs of the workload, to know the noise between runs from."""
    sides = runs or ([baseline.request_table], [run.request_table])
    trials = min(len(side) for side in sides) > 1
    changes = latency_changes(*sides)
    checks = [_latency_check(c, tolerance, trials, history) for c in changes if c.metric in GATED]
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
    untold = [c for c in checks if CANNOT_TELL in c.change]
    if not closed and untold:
        detail = ("open, undecided: " + "; ".join(f"{c.figure}: {c.baseline} -> {c.run}" for c in untold) +
                  f", but {CANNOT_TELL}")
    return Gate(passed=not closed, tolerance=tolerance, detail=detail, checks=checks,
                between_runs=_between_runs(sides, history))
