"""Per-conversation prefix lengths: all equal, or log-normal with a given p50 and p95."""

from __future__ import annotations

import numpy as np

_Z95 = 1.6448536269514722  # standard normal 95th percentile
MIN_PREFIX_TOKENS = 64


def prefix_lengths(count: int, p50: int, p95: int, rng: np.random.Generator) -> np.ndarray:
    """`count` target lengths; with p95 > p50, drawn so the distribution's median is p50 and its 95th is p95."""
    if p95 <= p50:
        return np.full(count, p50, dtype=np.int64)
    sigma = (np.log(p95) - np.log(p50)) / _Z95
    drawn = rng.lognormal(mean=np.log(p50), sigma=sigma, size=count)
    return np.maximum(np.rint(drawn), MIN_PREFIX_TOKENS).astype(np.int64)
