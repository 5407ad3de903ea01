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
        self._window = calibration.counted if len(calibration.counted) else np.arange(len(pool))

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

    def window(self, lead: str, rng: np.random.Generator, budget: float) -> str:
        """`lead`, then the counted records (Calibration.counted) read as one text from a point `rng` draws (round
        the end to the first), as much as `budget` tokens hold (each line with the newline before it): whole records,
        then plain words of the pool that `rng` picks, then filler words for the last token or two. The same `rng`
        state gives the same text."""
        indices, cumulative = self._run(int(rng.integers(len(self._window))), budget)
        keep = int(np.searchsorted(cumulative, budget, side="right"))
        spent = float(cumulative[keep - 1]) if keep else 0.0
        parts = [lead] if lead else []
        parts.extend(self._texts[indices[:keep]].tolist())
        line = self._last_line(rng, budget - spent - self.calibration.join_tokens)
        if line:
            parts.append(line)
        return "\n".join(parts)

    def _run(self, start: int, budget: float) -> tuple[np.ndarray, np.ndarray]:
        """Consecutive record indices from `start`, and their running cost, to past `budget`."""
        count = int(max(budget, 0.0) / self._mean_cost * 1.25) + 4
        while True:
            indices = self._window[(start + np.arange(count)) % len(self._window)]
            cumulative = np.cumsum(self._cost[indices])
            if cumulative[-1] > budget:
                return indices, cumulative
            count *= 2

    def _last_line(self, rng: np.random.Generator, tokens: float) -> str:
        """What a budget has left after whole records, `tokens`: plain words of the pool, each of a counted cost
        (Calibration.words), drawn by `rng` (a block too short for a record is still its own text), those that
        fit; then filler words for the rest."""
        c = self.calibration
        usable = c.word_tokens > 0
        cheapest = float(c.word_tokens[usable].min()) if usable.any() else float("inf")
        words: list[str] = []
        left = tokens
        draws = rng.integers(len(c.words), size=4 * len(c.words) + int(max(tokens, 0.0) / min(cheapest, 1e9)) + 1) \
            if len(c.words) else np.empty(0, np.int64)
        for i in draws:  # bounded: a word that does not fit is passed over
            if left < cheapest:
                break
            if usable[i] and c.word_tokens[i] <= left:
                words.append(c.words[i])
                left -= float(c.word_tokens[i])
        fill = int(round(left / c.filler_tokens))
        return " ".join(words + [FILLER_WORD] * max(0, fill))

    def text(self, rng: np.random.Generator, tokens: float, lead: str = "") -> str:
        """About `tokens` target tokens of records, starting with the line `lead`."""
        budget = tokens - (self.calibration.estimate(lead) + self.calibration.join_tokens if lead else 0.0)
        indices, cumulative = self.records(rng, budget)
        return self.join(lead, indices, float(cumulative[-1]) if len(cumulative) else 0.0, budget)

