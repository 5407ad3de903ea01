"""Two RunReports (stock, patched) -> a Comparison with a one-line conclusion. Pure.

Regression is judged on the requests that completed in both runs (same conversation and turn), so a stock run
that crashed half-way is compared on what it did finish: the patched TTFT p50 over those may grow by at most
`max_ttft_regression` (and at least REGRESSION_FLOOR_MS), their decode tokens/s may drop by at most
`max_throughput_regression`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from enum import StrEnum

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadrepro.judge.trials import Rate, p_value, trials_needed
from loadrepro.profile import VerdictSpec
from loadrepro.run_report import RequestRow, RunReport, TrialsInfo, VerdictStatus

REGRESSION_FLOOR_MS = 50.0  # TTFT differences below this are noise on a busy machine, whatever the ratio
MATERIAL = 0.05  # a latency change smaller than this share of stock's is not called a change, however sure
MIN_ROWS = 10  # completed requests a side needs for a bootstrap interval
RESAMPLES = 2000


class Conclusion(StrEnum):
    FIX_CONFIRMED = "fix confirmed"
    NOT_REPRODUCED = "not reproduced on stock"
    STILL_FAILS = "patched still fails"
    REGRESSES = "patched regresses"
    NOT_SHOWN = "not shown"  # trials: stock failed more often, but not significantly so


class Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    test: str
    stock: str
    patched: str
    change: str = ""


class SideTrials(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    failed: int = Field(description="Trials of this side that failed.")
    n: int = Field(description="Trials of this side run.")
    ci95: list[float] = Field(description="Exact (Clopper-Pearson) 95% interval of its failure rate.")


class LatencyChange(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    metric: str = Field(description="What is compared, over each side's completed requests.")
    stock: float | None = Field(description="Its value on the stock side.")
    patched: float | None = Field(description="Its value on the patched side.")
    difference: float | None = Field(description="patched - stock.")
    ci95: list[float] | None = Field(description="Bootstrap 95% interval of the difference (requests resampled).")
    verdict: str = Field(description="regressed, improved, no significant change, or not enough requests.")


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: str = "loadrepro.judge.compare/1"
    conclusion: Conclusion
    detail: str
    stock_label: str
    patched_label: str
    rows: list[Row]
    p_value: float | None = Field(None, description="Trials: the one-sided Fisher exact test's p that stock fails "
                                  "more often than patched.")
    alpha: float | None = Field(None, description="Trials: the p below which a fix is shown.")
    stock_trials: SideTrials | None = Field(None, description="Trials: the stock side's failures.")
    patched_trials: SideTrials | None = Field(None, description="Trials: the patched side's failures.")
    trials_needed: int | None = Field(
        None, description="Not shown: trials a side that would show it, at stock's observed failure rate.")
    latency: list[LatencyChange] = Field(
        [], description="TTFT, ITL and decode speed, patched against stock, with bootstrap 95% intervals.")

    @property
    def fix_confirmed(self) -> bool:
        return self.conclusion is Conclusion.FIX_CONFIRMED


def _matched(a: RunReport, b: RunReport) -> list[tuple[RequestRow, RequestRow]]:
    done = {(r.conversation, r.turn): r for r in a.request_table if r.outcome == "ok"}
    return [(done[(r.conversation, r.turn)], r) for r in b.request_table
            if r.outcome == "ok" and (r.conversation, r.turn) in done]


def _decode_rate(row: RequestRow) -> float | None:
    if not row.output_tokens or row.output_tokens < 8 or row.e2e_ms is None or row.ttft_ms is None:
        return None
    seconds = (row.e2e_ms - row.ttft_ms) / 1000
    return row.output_tokens / seconds if seconds > 0 else None


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _significant(latency: list[LatencyChange], metric: str) -> bool:
    """Whether the bootstrap does not call `metric`'s change noise: it says "regressed", or has too few requests to
    say anything (then the thresholds alone decide)."""
    change = next((c for c in latency if c.metric == metric), None)
    return change is None or change.ci95 is None or change.verdict == "regressed"


def _regression(a: RunReport, b: RunReport, spec: VerdictSpec,
                latency: list[LatencyChange]) -> tuple[str | None, list[Row]]:
    """Patched slower than stock beyond [verdict] max_ttft_regression or max_throughput_regression on the requests
    both completed, and beyond noise: a change the bootstrap interval does not tell from none (a busy machine's
    near-tie) is not a regression."""
    pairs = _matched(a, b)
    ttft_a, ttft_b = _median([x.ttft_ms for x, _ in pairs]), _median([y.ttft_ms for _, y in pairs])
    rate_a, rate_b = _median([_decode_rate(x) for x, _ in pairs]), _median([_decode_rate(y) for _, y in pairs])
    rows = [Row(test=f"TTFT p50 of the {len(pairs)} requests both completed (ms)", stock=_num(ttft_a),
                patched=_num(ttft_b), change=_delta(ttft_a, ttft_b)),
            Row(test="their decode tokens/s (p50)", stock=_num(rate_a), patched=_num(rate_b),
                change=_delta(rate_a, rate_b))]
    if ttft_a is not None and ttft_b is not None and ttft_b - ttft_a > REGRESSION_FLOOR_MS \
            and ttft_b > ttft_a * (1 + spec.max_ttft_regression) and _significant(latency, METRICS[0][0]):
        return f"TTFT p50 {ttft_a:.0f} -> {ttft_b:.0f} ms on requests both completed", rows
    if rate_a and rate_b is not None and rate_b < rate_a * (1 - spec.max_throughput_regression) and \
            _significant(latency, METRICS[3][0]):
        return f"decode {rate_a:.0f} -> {rate_b:.0f} tokens/s on requests both completed", rows
    return None, rows


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _delta(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return ""
    return f"{(b - a) / a:+.0%}"


def _first_failure(r: RunReport) -> str:
    f = r.first_failure
    return "none" if f is None else f"{f.t_s:.1f} s ({f.outcome})"


def _completed(r: RunReport) -> str:
    return f"{r.requests.by_outcome.get('ok', 0)}/{r.requests.total}"


def _rows(a: RunReport, b: RunReport) -> list[Row]:
    def pct(r: RunReport, key: str) -> str:
        return _num(getattr(r.latency.ttft_ms, key))

    def cached(r: RunReport) -> str:
        return "not reported" if r.cache.cached_tokens is None else f"{r.cache.cached_tokens:,}"

    def death(r: RunReport) -> str:
        return next((x.detail for x in r.rules if x.name == "engine_death" and x.fired), "no")

    return [
        Row(test="verdict", stock=a.verdict, patched=b.verdict),
        Row(test="completed", stock=_completed(a), patched=_completed(b)),
        Row(test="outcomes", stock=_outcomes(a), patched=_outcomes(b)),
        Row(test="engine died", stock=death(a), patched=death(b)),
        Row(test="first failure", stock=_first_failure(a), patched=_first_failure(b)),
        Row(test="/health after the run", stock=str(a.health.post), patched=str(b.health.post)),
        Row(test="TTFT p50 / p95 (ms)", stock=f"{pct(a, 'p50')} / {pct(a, 'p95')}",
            patched=f"{pct(b, 'p50')} / {pct(b, 'p95')}"),
        Row(test="output tokens/s", stock=_num(a.throughput.output_tokens_per_s),
            patched=_num(b.throughput.output_tokens_per_s),
            change=_delta(a.throughput.output_tokens_per_s, b.throughput.output_tokens_per_s)),
        Row(test="cached prompt tokens", stock=cached(a), patched=cached(b)),
    ]


def _outcomes(r: RunReport) -> str:
    return ", ".join(f"{k} {v}" for k, v in r.requests.by_outcome.items())


def _itl(row: RequestRow) -> float | None:
    if not row.output_tokens or row.output_tokens < 2 or row.e2e_ms is None or row.ttft_ms is None:
        return None
    return (row.e2e_ms - row.ttft_ms) / (row.output_tokens - 1)


# name, what it reads of a completed request, its percentile, whether higher is better
METRICS: tuple[tuple[str, Callable[[RequestRow], float | None], float, bool], ...] = (
    ("TTFT p50 (ms)", lambda r: r.ttft_ms, 50, False),
    ("TTFT p95 (ms)", lambda r: r.ttft_ms, 95, False),
    ("ITL p50 (ms, each request's mean)", _itl, 50, False),
    ("decode tokens/s p50 (each request's)", _decode_rate, 50, True),
)


def _change(name: str, a: list[float], b: list[float], q: float, higher_is_better: bool) -> LatencyChange:
    if len(a) < MIN_ROWS or len(b) < MIN_ROWS:
        return LatencyChange(metric=name, stock=None, patched=None, difference=None, ci95=None,
                             verdict="not enough requests")

    def diff(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(np.percentile(y, q, axis=axis) - np.percentile(x, q, axis=axis))

    from scipy import stats  # here: importing scipy.stats costs every command ~1 s, and only comparisons use it

    # A seeded generator: the same two runs always get the same interval.
    ci = stats.bootstrap((np.array(a), np.array(b)), diff, n_resamples=RESAMPLES, confidence_level=0.95,
                         method="percentile", rng=np.random.default_rng(0)).confidence_interval
    lo, hi = float(ci.low), float(ci.high)
    base, d = float(np.percentile(a, q)), float(diff(np.array(a), np.array(b)))
    worse, better = (lo > 0, hi < 0) if not higher_is_better else (hi < 0, lo > 0)
    material = abs(d) > MATERIAL * abs(base)
    verdict = "regressed" if worse and material else "improved" if better and material else "no significant change"
    return LatencyChange(metric=name, stock=round(base, 3), patched=round(base + d, 3), difference=round(d, 3),
                         ci95=[round(lo, 3), round(hi, 3)], verdict=verdict)


def latency_changes(stock: Sequence[RequestRow], patched: Sequence[RequestRow]) -> list[LatencyChange]:
    """Each of METRICS over the completed requests of each side (any number of runs' rows), patched - stock, with
    a bootstrap 95% interval: "regressed" or "improved" only when the interval excludes no change and the change
    is at least MATERIAL of stock's value."""
    done_a = [r for r in stock if r.outcome == "ok"]
    done_b = [r for r in patched if r.outcome == "ok"]
    changes = []
    for name, read, q, higher in METRICS:
        a = [v for r in done_a if (v := read(r)) is not None]
        b = [v for r in done_b if (v := read(r)) is not None]
        changes.append(_change(name, a, b, q, higher))
    return changes


def _latency_rows(changes: list[LatencyChange]) -> list[Row]:
    return [Row(test=f"{c.metric}: patched - stock (95% CI)", stock=_num(c.stock), patched=_num(c.patched),
                change=(f"{c.difference:+,.2f} [{c.ci95[0]:+,.2f}, {c.ci95[1]:+,.2f}] {c.verdict}"
                        if c.ci95 is not None and c.difference is not None else c.verdict)) for c in changes]


def compare(stock: RunReport, patched: RunReport, spec: VerdictSpec,
            rows: tuple[Sequence[RequestRow], Sequence[RequestRow]] | None = None) -> Comparison:
    """`rows`: each side's requests to compare latency over (several runs' rows, for trials); default: each
    report's request table."""
    latency = latency_changes(*(rows or (stock.request_table, patched.request_table)))
    regression, regression_rows = _regression(stock, patched, spec, latency)
    if stock.passed:
        conclusion, detail = Conclusion.NOT_REPRODUCED, "the stock run passed, so this workload shows no defect"
    elif patched.verdict == VerdictStatus.FAIL:
        conclusion, detail = Conclusion.STILL_FAILS, "; ".join(patched.reasons[:2])
    elif regression is not None:
        conclusion, detail = Conclusion.REGRESSES, regression
    else:
        conclusion, detail = Conclusion.FIX_CONFIRMED, (
            f"stock failed ({stock.reasons[0] if stock.reasons else 'see its report'}); patched passed with "
            f"{_completed(patched)} completed")
    shown = [r for r in _rows(stock, patched) + regression_rows + _latency_rows(latency)
             if not (_empty(r.stock) and _empty(r.patched))]
    return Comparison(conclusion=conclusion, detail=detail, stock_label=stock.label, patched_label=patched.label,
                      rows=shown, latency=latency)


def _empty(cell: str) -> bool:
    """A cell with no value in it ("-", "- / -"): a row empty on both sides says nothing, so it is left out."""
    return not cell.replace("-", "").replace("/", "").strip()


def _rate(t: TrialsInfo) -> Rate:
    return Rate(t.failed, t.n, (t.ci95[0], t.ci95[1]))


def compare_trials(stock: RunReport, patched: RunReport, spec: VerdictSpec, alpha: float,
                   rows: tuple[Sequence[RequestRow], Sequence[RequestRow]] | None = None) -> Comparison:
    """Two trial sets' summary reports: "fix confirmed" only when patched failed in no trial and stock failed
    significantly more often (one-sided Fisher exact test, p < alpha), and patched does not regress. `rows`:
    every trial's requests on each side, for the latency intervals."""
    assert stock.trials is not None and patched.trials is not None, "compare_trials compares summaries of trials"
    s, p = _rate(stock.trials), _rate(patched.trials)
    pv = p_value(s, p)
    base = compare(stock, patched, spec, rows)
    needed = None
    if s.failed == 0:
        conclusion, detail = Conclusion.NOT_REPRODUCED, (f"stock failed in none of its {s.n} trials (a failure rate "
                                                         f"up to {s.ci95[1]:.0%} would often look like this)")
    elif p.failed:
        conclusion, detail = Conclusion.STILL_FAILS, f"patched failed {p} trials; stock failed {s}"
    elif pv >= alpha:
        needed = trials_needed(s.rate, alpha)
        more = (f"; at stock's observed rate, {needed} trials a side would show it" if needed else
                "; at stock's observed rate, no number of trials within reason would show it")
        conclusion, detail = Conclusion.NOT_SHOWN, (f"stock failed {s} trials, patched {p}: p = {pv:.3g} (one-sided "
                                                    f"Fisher exact test), not below {alpha:g}" + more)
    elif base.conclusion is Conclusion.REGRESSES:
        conclusion, detail = base.conclusion, base.detail
    else:
        conclusion, detail = Conclusion.FIX_CONFIRMED, (f"stock failed {s} trials, patched {p}: p = {pv:.3g} "
                                                        f"(one-sided Fisher exact test, below {alpha:g})")
    shown = [Row(test="failed trials (95% CI)", stock=str(s), patched=str(p)),
             Row(test="one-sided Fisher exact p", stock=f"{pv:.3g}", patched=""),
             *(r for r in base.rows if r.test != "verdict")]
    return Comparison(conclusion=conclusion, detail=detail, stock_label=stock.label, patched_label=patched.label,
                      rows=shown, p_value=pv, alpha=alpha, trials_needed=needed, latency=base.latency,
                      stock_trials=SideTrials(failed=s.failed, n=s.n, ci95=list(s.ci95)),
                      patched_trials=SideTrials(failed=p.failed, n=p.n, ci95=list(p.ci95)))
