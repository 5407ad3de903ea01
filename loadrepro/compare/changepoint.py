"""Change points in a series of runs (a nightly job's nights, oldest first): E-divisive means (Matteson and James,
"A Nonparametric Approach for Multiple Change Point Analysis of Multivariate Data", 2014), the way Apache Otava
(formerly Hunter) finds them in performance CI, with a seeded permutation test of significance.

A pair of runs cannot tell a slow creep from the noise between runs: every night differs from the last by less
than two runs of one engine do. The series can: E-divisive splits it where the runs before and after differ most
in distribution (their mean distance apart, less the mean distances within each side), and a permutation test asks
how often shuffled runs split that far apart. The split is repeated inside each segment until one is not
significant. Seeded: one series gives one answer, night after night. Pure; numpy only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

PERMUTATIONS = 199  # the smallest p a test can give is 1/(PERMUTATIONS + 1) = 0.005
SEED = 0


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first run of the new segment (never the series' first)
    p_value: float  # the permutation test's: the share of shuffled series that split at least as far apart


def change_points(series: Sequence[float], alpha: float, permutations: int = PERMUTATIONS,
                  seed: int = SEED) -> list[ChangePoint]:
    """Each significant change point of `series`, in order. Otava's divisive loop: the best split over the
    current segments is kept while its permutation p is at most `alpha`."""
    values = np.asarray(series, dtype=np.float64)
    rng = np.random.default_rng(seed)
    found: list[ChangePoint] = []
    while True:
        segments = _segments(len(values), [c.index for c in found])
        best = _best_split(values, segments)
        if best is None:
            return found
        index, q = best
        p = _permutation_p(values, segments, q, permutations, rng)
        if p > alpha:
            return found
        found = sorted([*found, ChangePoint(index, p)], key=lambda c: c.index)


def _segments(n: int, cuts: list[int]) -> list[tuple[int, int]]:
    bounds = [0, *cuts, n]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def _best_split(values: NDArray[np.float64], segments: list[tuple[int, int]]) -> tuple[int, float] | None:
    """The split (its index and Q-hat) of greatest Q-hat over every segment of two runs or more."""
    sums = _pair_sums(values)
    splits = [_best_in(sums, a, b) for a, b in segments if b - a > 1]
    return max(splits, key=lambda s: s[1]) if splits else None


def _pair_sums(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Prefix sums of |x_i - x_j| (alpha = 1 of the energy distance), padded: any block's sum in four reads."""
    distances = np.abs(values[:, None] - values[None, :])
    sums = np.zeros((len(values) + 1, len(values) + 1))
    sums[1:, 1:] = distances.cumsum(0).cumsum(1)
    return sums


def _best_in(sums: NDArray[np.float64], start: int, end: int) -> tuple[int, float]:
    """Q-hat(X, Y) = n m / (n + m) * E-hat for X = [start, tau) and Y = [tau, kappa), maximised over
    start < tau < kappa <= end; E-hat = the mean distance between X and Y times 2, less the mean distance within
    X and within Y (a one-run side has none)."""
    tau, kappa = np.meshgrid(np.arange(start + 1, end), np.arange(start + 2, end + 1), indexing="ij")

    def block(a: NDArray[np.int_] | int, b: NDArray[np.int_] | int, c: NDArray[np.int_] | int,
              d: NDArray[np.int_] | int) -> NDArray[np.float64]:
        return sums[b, d] - sums[a, d] - sums[b, c] + sums[a, c]  # type: ignore[no-any-return]

    n, m = (tau - start).astype(float), (kappa - tau).astype(float)
    valid = kappa > tau
    between = np.where(valid, block(start, tau, tau, kappa), 0.0)
    within_x = block(start, tau, start, tau)  # each pair twice: sum over i<j is half
    within_y = np.where(valid, block(tau, kappa, tau, kappa), 0.0)
    mean_x = np.divide(within_x, n * (n - 1), out=np.zeros_like(n), where=n > 1)
    mean_y = np.divide(within_y, m * (m - 1), out=np.zeros_like(m), where=valid & (m > 1))
    mean_xy = np.divide(between, n * m, out=np.zeros_like(n), where=valid)
    q = np.where(valid, n * m / (n + m) * (2 * mean_xy - mean_x - mean_y), -np.inf)
    i, j = np.unravel_index(int(np.argmax(q)), q.shape)
    return int(tau[i, j]), float(q[i, j])


def _permutation_p(values: NDArray[np.float64], segments: list[tuple[int, int]], q: float, permutations: int,
                   rng: np.random.Generator) -> float:
    """(1 + shuffles whose best split reaches `q`) / (1 + shuffles), each shuffle within each segment, as the
    E-divisive paper's test does (ecp's p; Otava's omits the 1 above)."""
    reached = 0
    for _ in range(permutations):
        shuffled = values.copy()
        for a, b in segments:
            shuffled[a:b] = rng.permutation(shuffled[a:b])
        best = _best_split(shuffled, segments)
        reached += best is not None and best[1] >= q
    return (1 + reached) / (1 + permutations)
