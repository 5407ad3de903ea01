"""Two RunReports (stock, patched) -> a Comparison with a one-line conclusion. Pure.

Latency is compared on the requests that completed on both sides (same run, conversation and turn), so a stock run
that crashed half-way is compared on what it did finish, and one definition serves the intervals and the
regression: each metric's difference over those pairs, with a bootstrap 95% interval that resamples the pairs, or,
over several runs (trials), the runs themselves (requests of one run are not independent of each other). Patched
regresses when that interval says so and the difference is beyond the thresholds: the TTFT p50 grown by more than
`max_ttft_regression`, or the decode tokens/s p50 dropped by more than `max_throughput_regression`, and in both
cases beyond noise (`beyond_noise`). The regression gate (compare/gate.py) uses the same noise.

Noise scales with what is measured. One run a side gives an interval of the requests' spread within a run, not of
what differs between two runs of one engine, so each side's run is split in halves (in request order) and the
figure taken on each: a change no larger than the larger of those gaps is one the engine shows against itself. With
several runs a side (trials) the runs are compared instead. Below that, a floor of what the client's own timing
reaches on a busy machine (TTFT_FLOOR_MS; PER_TOKEN_FLOOR_MS of the time per token: an engine that sends a whole
answer in one burst has ITLs of microseconds, and +25% of nothing is not a regression).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadrepro.compare.trials import Rate, p_value, trials_needed
from loadrepro.config.profile import VerdictSpec
from loadrepro.schema.long_run_sections import TrialsInfo
from loadrepro.schema.report_kinds import VerdictStatus
from loadrepro.schema.report_sections import RequestRow, health_said
from loadrepro.schema.run_report import RunReport

TTFT_FLOOR_MS = 10.0  # TTFT differences below this are the client's timing on a busy machine, whatever the ratio
PER_TOKEN_FLOOR_MS = 1.0  # and differences of the time per token (ITL, decode speed) below this
MATERIAL = 0.05  # a latency change smaller than this share of stock's is not called a change, however sure
MIN_ROWS = 10  # requests completed on both sides needed for a bootstrap interval
RESAMPLES = 2000
_CHUNK = 100  # resamples of one run drawn at once: a chunk of index rows, not all 2,000 of them in memory

# Each run's request rows, on one side: one run, or every trial's (in trial order, so that run i of each side ran
# the same workload).
Runs = Sequence[Sequence[RequestRow]]


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
    metric: str = Field(description="What is compared, over the requests both sides completed.")
    stock: float | None = Field(description="Its value on the stock side.")
    patched: float | None = Field(description="Its value on the patched side.")
    difference: float | None = Field(description="patched - stock.")
    ci95: list[float] | None = Field(description="Bootstrap 95% interval of the difference (the pairs resampled, or "
                                     "the runs, for several).")
    verdict: str = Field(description="regressed, improved, no significant change, or not enough requests.")
    noise: float | None = Field(None, description=(
        "What differs between two measurements of one engine, in the figure's units: between the halves of each "
        "side's run (one run a side) or between each side's runs (trials), the larger. A change within it is not "
        "called a regression."))


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: str = "loadrepro.compare.comparison/1"
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


def _matched(stock: Runs, patched: Runs) -> list[list[tuple[RequestRow, RequestRow]]]:
    """Per run (the i-th of each side), the requests both completed, paired by conversation and turn."""
    paired = []
    for a_rows, b_rows in zip(stock, patched):
        done = {(r.conversation, r.turn): r for r in a_rows if r.outcome == "ok"}
        paired.append([(done[(r.conversation, r.turn)], r) for r in b_rows
                       if r.outcome == "ok" and (r.conversation, r.turn) in done])
    return paired


def _decode_rate(row: RequestRow) -> float | None:
    if not row.output_tokens or row.output_tokens < 8 or row.e2e_ms is None or row.ttft_ms is None:
        return None
    seconds = (row.e2e_ms - row.ttft_ms) / 1000
    return row.output_tokens / seconds if seconds > 0 else None


def _regression(latency: list[LatencyChange], pairs: int, spec: VerdictSpec) -> tuple[str | None, list[Row]]:
    """Patched slower than stock beyond [verdict] max_ttft_regression or max_throughput_regression on the requests
    both completed, and beyond noise: the same differences the latency intervals are of, and only when the interval
    says "regressed" too (a busy machine's near-tie is not a regression) or there are too few pairs for one (then
    the thresholds alone decide)."""
    ttft, rate = (next(c for c in latency if c.metric == METRICS[k][0]) for k in (0, 3))
    rows = [Row(test=f"TTFT p50 of the {pairs} requests both completed (ms)", stock=_num(ttft.stock),
                patched=_num(ttft.patched), change=_delta(ttft.stock, ttft.patched)),
            Row(test="their decode tokens/s (p50)", stock=_num(rate.stock), patched=_num(rate.patched),
                change=_delta(rate.stock, rate.patched))]
    a, b = ttft.stock, ttft.patched
    if a is not None and b is not None and b > a * (1 + spec.max_ttft_regression) and beyond_noise(ttft) \
            and ttft.verdict in ("regressed", NOT_ENOUGH):
        return f"TTFT p50 {a:.0f} -> {b:.0f} ms on requests both completed", rows
    a, b = rate.stock, rate.patched
    if a and b and b < a * (1 - spec.max_throughput_regression) and beyond_noise(rate) and \
            rate.verdict in ("regressed", NOT_ENOUGH):
        return f"decode {a:.0f} -> {b:.0f} tokens/s on requests both completed", rows
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
        Row(test="/health after the run", stock=health_said(a.health.post), patched=health_said(b.health.post)),
        Row(test="TTFT p50 / p95 (ms)", stock=f"{pct(a, 'p50')} / {pct(a, 'p95')}",
            patched=f"{pct(b, 'p50')} / {pct(b, 'p95')}"),
        Row(test="output tokens/s", stock=_num(a.throughput.output_tokens_per_s),
            patched=_num(b.throughput.output_tokens_per_s),
            change=_delta(a.throughput.output_tokens_per_s, b.throughput.output_tokens_per_s)),
        Row(test="cached prompt tokens", stock=cached(a), patched=cached(b)),
        *_slo_rows(a, b),
    ]


def _slo_rows(a: RunReport, b: RunReport) -> list[Row]:
    """The service level ([slo]) of each side, when both judged one."""
    if a.slo is None or b.slo is None:
        return []

    def met(r: RunReport) -> str:
        s = r.slo
        assert s is not None
        return "-" if s.attainment is None else f"{s.attainment:.1%} ({s.met:,} of {s.requests:,})"

    return [Row(test="SLO attainment", stock=met(a), patched=met(b)),
            Row(test="goodput (requests/s that met the SLO)", stock=_num(a.slo.goodput_requests_per_s),
                patched=_num(b.slo.goodput_requests_per_s),
                change=_delta(a.slo.goodput_requests_per_s, b.slo.goodput_requests_per_s))]


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


NOT_ENOUGH = "not enough requests"


def _differences(runs: list[tuple[np.ndarray, np.ndarray]], q: float, rng: np.random.Generator) -> np.ndarray:
    """RESAMPLES bootstrap differences (patched - stock) of the q-th percentile: the pairs of one run resampled, or
    for several runs the runs themselves (each drawn whole, with replacement)."""
    def diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(np.percentile(b, q, axis=axis) - np.percentile(a, q, axis=axis))

    if len(runs) == 1:
        a, b = runs[0]
        chunks = []
        for start in range(0, RESAMPLES, _CHUNK):
            picks = rng.integers(0, len(a), size=(min(_CHUNK, RESAMPLES - start), len(a)))
            chunks.append(diff(a[picks], b[picks]))
        return np.concatenate(chunks)
    drawn = rng.integers(0, len(runs), size=(RESAMPLES, len(runs)))
    return np.array([diff(np.concatenate([runs[k][0] for k in row]), np.concatenate([runs[k][1] for k in row]))
                     for row in drawn])


def _noise(runs: list[tuple[np.ndarray, np.ndarray]], q: float) -> float:
    """The module's noise: per side, the gap between its run's halves (in request order), or between its runs'
    figures (several runs); the larger side's."""
    gaps = []
    for side in (0, 1):
        parts = [r[side] for r in runs] if len(runs) > 1 else np.array_split(runs[0][side], 2)
        figures = [float(np.percentile(part, q)) for part in parts if len(part)]
        gaps.append(max(figures) - min(figures) if figures else 0.0)
    return max(gaps)


def within_noise(c: LatencyChange) -> str | None:
    """Why `c`'s change is no larger than what differs between two measurements of one engine (its noise, or the
    floor of the client's own timing: TTFT_FLOOR_MS, or PER_TOKEN_FLOOR_MS of the time per token for ITL and decode
    speed); None when it is larger."""
    if c.stock is None or c.patched is None:
        return "no figure"
    if abs(c.patched - c.stock) <= (c.noise or 0.0):
        return f"within the gap between the halves or runs of one side ({c.noise:,.2f})"
    if next(higher for name, _, _, higher in METRICS if name == c.metric):  # a rate: the time per token it means
        if c.stock <= 0 or c.patched <= 0 or abs(1000 / c.patched - 1000 / c.stock) > PER_TOKEN_FLOOR_MS:
            return None
        return f"under {PER_TOKEN_FLOOR_MS:g} ms per token, the floor of the client's timing"
    floor = TTFT_FLOOR_MS if c.metric.startswith("TTFT") else PER_TOKEN_FLOOR_MS
    return None if abs(c.patched - c.stock) > floor else f"under {floor:g} ms, the floor of the client's timing"


def beyond_noise(c: LatencyChange) -> bool:
    return within_noise(c) is None


def _change(name: str, runs: list[tuple[np.ndarray, np.ndarray]], q: float, higher_is_better: bool) -> LatencyChange:
    """`runs`: per run, the metric's stock and patched values of the same requests (pairs), in request order."""
    runs = [(a, b) for a, b in runs if len(a)]
    if not runs:
        return LatencyChange(metric=name, stock=None, patched=None, difference=None, ci95=None, verdict=NOT_ENOUGH)
    a_all, b_all = np.concatenate([a for a, _ in runs]), np.concatenate([b for _, b in runs])
    base, d = float(np.percentile(a_all, q)), float(np.percentile(b_all, q) - np.percentile(a_all, q))
    if len(a_all) < MIN_ROWS:  # the values, but no interval: the regression's thresholds alone decide
        return LatencyChange(metric=name, stock=round(base, 3), patched=round(base + d, 3), difference=round(d, 3),
                             ci95=None, verdict=NOT_ENOUGH)
    noise = round(_noise(runs, q), 3)
    # A seeded generator: the same two runs always get the same interval.
    lo, hi = (float(x) for x in np.percentile(_differences(runs, q, np.random.default_rng(0)), [2.5, 97.5]))
    worse, better = (lo > 0, hi < 0) if not higher_is_better else (hi < 0, lo > 0)
    material = abs(d) > MATERIAL * abs(base)
    verdict = "regressed" if worse and material else "improved" if better and material else "no significant change"
    return LatencyChange(metric=name, stock=round(base, 3), patched=round(base + d, 3), difference=round(d, 3),
                         ci95=[round(lo, 3), round(hi, 3)], verdict=verdict, noise=noise)


def latency_changes(stock: Runs, patched: Runs) -> list[LatencyChange]:
    """Each of METRICS over the requests both sides completed (run by run), patched - stock, with a bootstrap 95%
    interval: "regressed" or "improved" only when the interval excludes no change and the change is at least
    MATERIAL of stock's value."""
    return _latency(_matched(stock, patched))


def _latency(paired: list[list[tuple[RequestRow, RequestRow]]]) -> list[LatencyChange]:
    changes = []
    for name, read, q, higher in METRICS:
        runs = []
        for pairs in paired:
            values = [(x, y) for a, b in pairs if (x := read(a)) is not None and (y := read(b)) is not None]
            runs.append((np.array([x for x, _ in values]), np.array([y for _, y in values])))
        changes.append(_change(name, runs, q, higher))
    return changes


def _latency_rows(changes: list[LatencyChange]) -> list[Row]:
    return [Row(test=f"{c.metric}: patched - stock (95% CI)", stock=_num(c.stock), patched=_num(c.patched),
                change=(f"{c.difference:+,.2f} [{c.ci95[0]:+,.2f}, {c.ci95[1]:+,.2f}] {c.verdict}"
                        if c.ci95 is not None and c.difference is not None else c.verdict)) for c in changes]


def compare(stock: RunReport, patched: RunReport, spec: VerdictSpec,
            runs: tuple[Runs, Runs] | None = None) -> Comparison:
    """`runs`: each side's runs to compare latency over (every trial's rows, for trials); default: each report's
    request table."""
    paired = _matched(*(runs or ([stock.request_table], [patched.request_table])))
    latency = _latency(paired)
    regression, regression_rows = _regression(latency, sum(len(p) for p in paired), spec)
    if stock.passed:
        conclusion, detail = Conclusion.NOT_REPRODUCED, "the stock run passed, so this workload shows no defect"
    elif patched.verdict == VerdictStatus.FAIL:
        conclusion, detail = Conclusion.STILL_FAILS, "; ".join(patched.reasons[:2])
    elif regression is not None and not _left_service(stock):
        conclusion, detail = Conclusion.REGRESSES, regression
    else:
        conclusion, detail = Conclusion.FIX_CONFIRMED, (
            f"stock failed ({stock.reasons[0] if stock.reasons else 'see its report'}); patched passed with "
            f"{_completed(patched)} completed")
        if regression is not None:
            detail += (f"; latency not judged against stock ({regression}): its engine died mid-run, so the requests "
                       "both completed are those it finished before, its quickest")
    shown = [r for r in _rows(stock, patched) + regression_rows + _latency_rows(latency)
             if not (_empty(r.stock) and _empty(r.patched))]
    return Comparison(conclusion=conclusion, detail=detail, stock_label=stock.label, patched_label=patched.label,
                      rows=shown, latency=latency)


def _left_service(r: RunReport) -> bool:
    """The engine (or a replica) died in the run: the requests it completed are those it finished before it died,
    its quickest (the slower ones were still running, and failed), so the same requests on the other side, served
    to the end, would look slower whatever the patch did."""
    return any(x.fired for x in r.rules if x.name in ("engine_death", "replica_death"))


def _empty(cell: str) -> bool:
    """A cell with no value in it ("-", "- / -"): a row empty on both sides says nothing, so it is left out."""
    return not cell.replace("-", "").replace("/", "").strip()


def _rate(t: TrialsInfo) -> Rate:
    return Rate(t.failed, t.n, (t.ci95[0], t.ci95[1]))


def compare_trials(stock: RunReport, patched: RunReport, spec: VerdictSpec, alpha: float,
                   runs: tuple[Runs, Runs] | None = None) -> Comparison:
    """Two trial sets' summary reports: "fix confirmed" only when patched failed in no trial and stock failed
    significantly more often (one-sided Fisher exact test, p < alpha), and patched does not regress. `runs`:
    every trial's requests on each side, for the latency intervals."""
    assert stock.trials is not None and patched.trials is not None, "compare_trials compares summaries of trials"
    s, p = _rate(stock.trials), _rate(patched.trials)
    pv = p_value(s, p)
    base = compare(stock, patched, spec, runs)
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
