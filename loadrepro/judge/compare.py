"""Two RunReports (stock, patched) -> a Comparison with a one-line conclusion. Pure.

Regression is judged on the requests that completed in both runs (same conversation and turn), so a stock run
that crashed half-way is compared on what it did finish: the patched TTFT p50 over those may grow by at most
`max_ttft_regression` (and at least REGRESSION_FLOOR_MS), their decode tokens/s may drop by at most
`max_throughput_regression`.
"""

from __future__ import annotations

import statistics
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from loadrepro.judge.trials import Rate, p_value, trials_needed
from loadrepro.profile import VerdictSpec
from loadrepro.run_report import RequestRow, RunReport, TrialsInfo

REGRESSION_FLOOR_MS = 50.0  # TTFT differences below this are noise on a busy machine, whatever the ratio


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


def _regression(a: RunReport, b: RunReport, spec: VerdictSpec) -> tuple[str | None, list[Row]]:
    pairs = _matched(a, b)
    ttft_a, ttft_b = _median([x.ttft_ms for x, _ in pairs]), _median([y.ttft_ms for _, y in pairs])
    rate_a, rate_b = _median([_decode_rate(x) for x, _ in pairs]), _median([_decode_rate(y) for _, y in pairs])
    rows = [Row(test=f"TTFT p50 of the {len(pairs)} requests both completed (ms)", stock=_num(ttft_a),
                patched=_num(ttft_b), change=_delta(ttft_a, ttft_b)),
            Row(test="their decode tokens/s (p50)", stock=_num(rate_a), patched=_num(rate_b),
                change=_delta(rate_a, rate_b))]
    if ttft_a is not None and ttft_b is not None and ttft_b - ttft_a > REGRESSION_FLOOR_MS \
            and ttft_b > ttft_a * (1 + spec.max_ttft_regression):
        return f"TTFT p50 {ttft_a:.0f} -> {ttft_b:.0f} ms on requests both completed", rows
    if rate_a and rate_b is not None and rate_b < rate_a * (1 - spec.max_throughput_regression):
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
        return next((x.detail for x in r.rules if x.name == "engine_death" and x.fired), "no")[:90]

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


def compare(stock: RunReport, patched: RunReport, spec: VerdictSpec) -> Comparison:
    regression, regression_rows = _regression(stock, patched, spec)
    if stock.verdict == "pass":
        conclusion, detail = Conclusion.NOT_REPRODUCED, "the stock run passed, so this workload shows no defect"
    elif patched.verdict == "fail":
        conclusion, detail = Conclusion.STILL_FAILS, "; ".join(patched.reasons[:2])
    elif regression is not None:
        conclusion, detail = Conclusion.REGRESSES, regression
    else:
        conclusion, detail = Conclusion.FIX_CONFIRMED, (
            f"stock failed ({stock.reasons[0] if stock.reasons else 'see its report'}); patched passed with "
            f"{_completed(patched)} completed")
    rows = [r for r in _rows(stock, patched) + regression_rows if not (_empty(r.stock) and _empty(r.patched))]
    return Comparison(conclusion=conclusion, detail=detail, stock_label=stock.label, patched_label=patched.label,
                      rows=rows)


def _empty(cell: str) -> bool:
    """A cell with no value in it ("-", "- / -"): a row empty on both sides says nothing, so it is left out."""
    return not cell.replace("-", "").replace("/", "").strip()


def _rate(t: TrialsInfo) -> Rate:
    return Rate(t.failed, t.n, (t.ci95[0], t.ci95[1]))


def compare_trials(stock: RunReport, patched: RunReport, spec: VerdictSpec, alpha: float) -> Comparison:
    """Two trial sets' summary reports: "fix confirmed" only when patched failed in no trial and stock failed
    significantly more often (one-sided Fisher exact test, p < alpha), and patched does not regress."""
    assert stock.trials is not None and patched.trials is not None, "compare_trials compares summaries of trials"
    s, p = _rate(stock.trials), _rate(patched.trials)
    pv = p_value(s, p)
    base = compare(stock, patched, spec)
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
    rows = [Row(test="failed trials (95% CI)", stock=str(s), patched=str(p)),
            Row(test="one-sided Fisher exact p", stock=f"{pv:.3g}", patched=""),
            *(r for r in base.rows if r.test != "verdict")]
    return Comparison(conclusion=conclusion, detail=detail, stock_label=stock.label, patched_label=patched.label,
                      rows=rows, p_value=pv, alpha=alpha, trials_needed=needed,
                      stock_trials=SideTrials(failed=s.failed, n=s.n, ci95=list(s.ci95)),
                      patched_trials=SideTrials(failed=p.failed, n=p.n, ci95=list(p.ci95)))
