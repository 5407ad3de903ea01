"""Assembling text to a token target from the record pool, by index: no faker calls, no tokenizer calls."""

from __future__ import annotations

import numpy as np

from loadrepro.workload.corpus import RecordPool
from loadrepro.workload.tokens import FILLER_WORD, Calibration


class Assembler:
    def __init__(self, pool: RecordPool, calibration: Calibration) -> None:
        self.pool = pool
        self.calibration = calibration
        self._texts = np.array(pool.texts, dtype=object)
        self._cost = calibration.record_tokens + calibration.join_tokens
        self._mean_cost = float(self._cost.mean())

    def records(self, rng: np.random.Generator, budget: float) -> tuple[np.ndarray, np.ndarray]:
        """Random record indices whose running cost stays within `budget`, and that running cost."""
        if budget <= 0:
            return np.empty(0, np.int64), np.empty(0)
        draw = int(budget / self._mean_cost * 1.25) + 16
        indices = rng.integers(0, len(self.pool), draw)
        cumulative = np.cumsum(self._cost[indices])
        while cumulative[-1] <= budget:  # unlucky draw of short records: draw more
            more = rng.integers(0, len(self.pool), draw)
            indices = np.concatenate([indices, more])
            cumulative = np.concatenate([cumulative, cumulative[-1] + np.cumsum(self._cost[more])])
        keep = int(np.searchsorted(cumulative, budget, side="right"))
        return indices[:keep], cumulative[:keep]

    def join(self, lead: str, indices: np.ndarray, spent: float, budget: float) -> str:
        """`lead`, the records, and filler words for what `budget` has left after `spent`."""
        words = int(round((budget - spent - self.calibration.join_tokens) / self.calibration.filler_tokens))
        parts = [lead] if lead else []
        parts.extend(self._texts[indices].tolist())
        if words > 0:
            parts.append(" ".join([FILLER_WORD] * words))
        return "\n".join(parts)

    def text(self, rng: np.random.Generator, tokens: float, lead: str = "") -> str:
        """About `tokens` target tokens of records, starting with the line `lead`."""
        budget = tokens - (self.calibration.estimate(lead) + self.calibration.join_tokens if lead else 0.0)
        indices, cumulative = self.records(rng, budget)
        return self.join(lead, indices, float(cumulative[-1]) if len(cumulative) else 0.0, budget)
