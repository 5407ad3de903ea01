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
and only the SLO's attainment and the rules can close it.

A pair cannot see a slow creep (each night a few % slower than the last, always within the noise between runs). The
history can: over the earlier runs and tonight's, oldest first, each gated figure is searched for change points
(compare/changepoint.py: E-divisive means with a permutation test, as Apache Otava does). A significant change point
that puts tonight's run in a segment worse than the one before it by more than the tolerance closes the gate; the
history's noise between runs is its spread within those segments, so a change kept in the history does not widen
it. Pure."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadrepro.compare.changepoint import change_points
from loadrepro.compare.comparison import METRICS, LatencyChange, Runs, latency_changes, within_noise
from loadrepro.compare.trials import Rate, p_value
from loadrepro.schema.report_kinds import Severity
from loadrepro.schema.report_sections import RequestRow
from loadrepro.schema.run_report import RunReport

GATE_ALPHA = 0.05  # the attainment's one-sided test: RUN missed the SLO more often than BASELINE with p below this
GATED = {name for name, *_ in METRICS}  # TTFT p50 and p95, ITL p50, each request's decode tokens/s
MIN_HISTORY = 3  # earlier runs needed to estimate the noise between runs from their spread
MIN_SERIES = 5  # runs (the history's and tonight's) needed to judge a change point: fewer split any way at random
CHANGE_ALPHA = 0.01  # a change point's permutation p at most this: per figure, about 1 unchanged series in 100 splits
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
    change_points: str = Field("", description=(
        "With --history: what the change-point pass over the earlier runs and RUN found, figure by figure (the run "
        "a change began at, the means before and after, its p), or why it could not judge one."))


class History(BaseModel):
    """Earlier runs of the gated workload (a nightly job's earlier nights): each gated figure over each run's
    completed requests."""
    model_config = ConfigDict(frozen=True, extra="forbid")
    runs: int = Field(description="Earlier runs of the workload read.")
    figures: dict[str, list[float]] = Field(description="Each gated figure, run by run, oldest first.")
    names: dict[str, list[str]] = Field(default_factory=dict, description="The run each of `figures` came from.")

    def noise(self, metric: str) -> float | None:
        """How far apart two runs of the unchanged engine may land, at 95%: the difference of two runs has the
        standard deviation of one times sqrt(2), that one estimated from the earlier runs' spread about the mean
        of their segment (split at the change points the history shows; Student's t, their count less one per
        segment degrees of freedom). None below MIN_HISTORY runs with the figure."""
        values = self.figures.get(metric, [])
        if len(values) < MIN_HISTORY:
            return None
        from scipy import stats  # here, not at import: only a gate with a history uses it

        cuts = list(_cuts(tuple(values))) if len(values) >= MIN_SERIES else []
        if len(values) - len(cuts) - 1 < MIN_HISTORY - 1:  # segments too short to leave a spread: take it whole
            cuts = []
        bounds = [0, *cuts, len(values)]
        residuals = np.concatenate([np.asarray(values[a:b]) - np.mean(values[a:b])
                                    for a, b in zip(bounds, bounds[1:], strict=False)])
        freedom = len(values) - len(bounds) + 1
        sd = math.sqrt(float(np.sum(residuals ** 2)) / freedom)
        return float(stats.t.ppf(0.975, freedom) * sd * math.sqrt(2))


@functools.cache
def _cuts(values: tuple[float, ...]) -> tuple[int, ...]:
    """Where a history's figure changes: each figure's noise is asked for more than once a gate."""
    return tuple(c.index for c in change_points(values, CHANGE_ALPHA))


def history_of(runs: Sequence[Sequence[RequestRow]], names: Sequence[str] | None = None) -> History:
    """Each gated figure of each earlier run (its completed requests), oldest first; `names`: each run's."""
    figures: dict[str, list[float]] = {}
    named: dict[str, list[str]] = {}
    for i, rows in enumerate(runs):
        for name, read, q, _ in METRICS:
            values = [x for r in rows if r.outcome == "ok" and (x := read(r)) is not None]
            if values:
                figures.setdefault(name, []).append(round(float(np.percentile(values, q)), 3))
                named.setdefault(name, []).append(names[i] if names else f"run {i + 1}")
    return History(runs=len(runs), figures=figures, names=named)


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


def _trend(history: History, tonight: History, tolerance: float) -> tuple[list[GateCheck], str]:
    """The change-point pass over the history's runs and tonight's, oldest first, figure by figure: a check for
    each figure with a change point, and what was found, in words."""
    checks, said = [], []
    for metric, *_, higher_is_better in METRICS:
        if metric not in GATED or metric not in tonight.figures:
            continue
        series = history.figures.get(metric, []) + tonight.figures[metric]
        names = history.names.get(metric, []) + [f"{n} (tonight)" for n in tonight.names.get(metric, [])]
        if len(names) != len(series):  # a history built without its runs' names
            names = [f"run {i + 1}" for i in range(len(series))]
        check, words = _figure_trend(metric, series, names, len(tonight.figures[metric]), higher_is_better,
                                     tolerance)
        checks += [check] if check else []
        said.append(f"{metric}: {words}")
    return checks, "; ".join(said)


def _figure_trend(metric: str, series: list[float], names: list[str], tonight: int, higher_is_better: bool,
                  tolerance: float) -> tuple[GateCheck | None, str]:
    """One figure's latest change point. It closes the gate when it puts tonight's runs (the last `tonight`) in a
    segment worse than the one before it by more than `tolerance`, and tonight's runs lie nearer the worse mean
    than the one before: an engine fixed tonight after a regression is not held to the regressed nights it shares
    a segment with until its own nights are enough to make one."""
    if len(series) < MIN_SERIES:
        return None, (f"cannot judge a change point from {len(series)} runs (the history's and tonight's), fewer "
                      f"than {MIN_SERIES}")
    found = change_points(series, CHANGE_ALPHA)
    if not found:
        return None, f"no change point over {len(series)} runs (p above {CHANGE_ALPHA})"
    last = found[-1]
    start = found[-2].index if len(found) > 1 else 0
    before, after = float(np.mean(series[start:last.index])), float(np.mean(series[last.index:]))
    sign = -1 if higher_is_better else 1

    def worse(value: float) -> bool:
        return before != 0 and sign * (value - before) / before > tolerance

    share = (after - before) / before if before else 0.0
    closed = worse(after) and sign * (float(np.mean(series[-tonight:])) - (before + after) / 2) > 0
    where = f"{names[last.index]}, run {last.index + 1} of {len(series)}"
    words = (f"a change point at {where}: mean {_num(before)} over runs {start + 1}-{last.index} -> {_num(after)} "
             f"over runs {last.index + 1}-{len(series)}, {share:+.1%} (p = {last.p_value:.3g})")
    verdict = ("; tonight's segment is worse by more than the tolerance" if closed else
               "; tonight's segment is worse, but tonight's run is nearer the mean before it" if worse(after)
               else "")
    return GateCheck(figure=f"{metric}, change point", baseline=f"{_num(before)} (runs {start + 1}-{last.index})",
                     run=f"{_num(after)} (runs {last.index + 1}-{len(series)})",
                     change=f"{share:+.1%} from {where} (E-divisive, p = {last.p_value:.3g})",
                     closed=closed), words + verdict


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
    trend = ""
    if history is not None:
        found, trend = _trend(history, history_of(sides[1], [f"RUN trial {i + 1}" if len(sides[1]) > 1 else "RUN"
                                                             for i in range(len(sides[1]))]), tolerance)
        checks += found
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
                between_runs=_between_runs(sides, history), change_points=trend)
