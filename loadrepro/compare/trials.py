"""Repeated trials of one workload: how often it failed, with what confidence, and when an A/B comparison of two
trial sets is decided. Pure; the tests and intervals are scipy's.

A failure rate is given with its exact (Clopper-Pearson) 95% interval. A fix is shown when the patched side failed
in no trial and the stock side failed significantly more often: one-sided Fisher exact test, p < alpha. Trials of
an A/B stop early once that answer is decided: shown, or out of reach even if every remaining stock trial failed,
or no longer possible because the patched side failed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

MAX_NEEDED = 1000  # trials_needed gives up beyond this many


@dataclass(frozen=True, slots=True)
class Trial:
    index: int  # 1-based
    seed: int
    passed: bool
    failing_rules: tuple[str, ...]  # the rules whose failures failed it
    first_failure_s: float | None
    run_dir: str


@dataclass(frozen=True, slots=True)
class Rate:
    failed: int
    n: int
    ci95: tuple[float, float]

    @property
    def rate(self) -> float:
        return self.failed / self.n if self.n else 0.0

    def __str__(self) -> str:
        lo, hi = self.ci95
        return f"{self.failed}/{self.n} ({self.rate:.0%}; 95% CI {lo:.0%}-{hi:.0%})"


def rate_of(trials: Sequence[Trial]) -> Rate:
    failed, n = sum(1 for t in trials if not t.passed), len(trials)
    if not n:
        return Rate(0, 0, (0.0, 1.0))
    from scipy import stats  # here, not at import: ~1 s for every command, and only trials use it

    ci = stats.binomtest(failed, n).proportion_ci(confidence_level=0.95, method="exact")
    return Rate(failed, n, (float(ci.low), float(ci.high)))


def signatures(trials: Sequence[Trial]) -> dict[str, int]:
    """Each failing rule, and in how many trials it failed."""
    return dict(Counter(rule for t in trials for rule in t.failing_rules).most_common())


def p_value(stock: Rate, patched: Rate) -> float:
    """One-sided Fisher exact test: the probability of stock failing this much more often than patched by chance."""
    from scipy import stats

    table = [[stock.failed, stock.n - stock.failed], [patched.failed, patched.n - patched.failed]]
    return float(stats.fisher_exact(table, alternative="greater").pvalue)


def _p(stock_failed: int, n: int) -> float:
    return p_value(Rate(stock_failed, n, (0.0, 1.0)), Rate(0, n, (0.0, 1.0)))


def trials_needed(rate: float, alpha: float) -> int | None:
    """Trials a side that would show a fix at `alpha`, if stock failed at `rate` and patched never (None: not
    within MAX_NEEDED, or a rate of 0)."""
    if rate <= 0:
        return None
    return next((n for n in range(1, MAX_NEEDED + 1) if _p(round(rate * n), n) < alpha), None)


def decided(stock: Sequence[Trial], patched: Sequence[Trial], planned: int, alpha: float) -> str | None:
    """Why the A/B needs no more trials, or None: "shown" (stock failed significantly more and patched never),
    "patched failed" (no fix can be shown), "out of reach" (even if every remaining stock trial failed, p would
    stay at or above alpha)."""
    s, p = rate_of(stock), rate_of(patched)
    if p.failed:
        return "patched failed"
    if s.failed and s.n == p.n and p_value(s, p) < alpha:
        return "shown"
    if _p(s.failed + planned - s.n, planned) >= alpha:
        return "out of reach"
    return None
