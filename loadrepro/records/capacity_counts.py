"""How the requests a capacity prediction was made for fared, counted over every record of a run, kept in memory or
not: the outcomes of each prediction (report.json capacity) and the requests whose admission disagreed with the KV
arithmetic (rule capacity_mismatch). A soak keeps its first records only; a disagreement hours in counts alike."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from loadrepro.config.capacity import MAX_LENGTH, Fit, Prediction
from loadrepro.records.vocabulary import Outcome, RequestRecord


class Predicted:
    """Each planned request's prediction, by conversation and turn. Shared, not copied: the copy of a tally taken at
    each checkpoint points at the same, as large as the plan."""

    def __init__(self, predictions: Iterable[Prediction]) -> None:
        self.by_turn = {(p.conversation, p.turn): p for p in predictions}

    def __deepcopy__(self, memo: dict[int, Any]) -> Predicted:
        return self


@dataclass(slots=True)
class Disagreements:
    count: int = 0
    first: RequestRecord | None = None  # the one of the lowest id

    def add(self, r: RequestRecord) -> None:
        self.count += 1
        if self.first is None or r.id < self.first.id:
            self.first = r


@dataclass(slots=True)
class CapacityCounts:
    predicted: Predicted
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)  # by prediction (a Fit's value), by outcome
    unrejected: Disagreements = field(default_factory=Disagreements)  # predicted never_fits, not rejected
    refused: Disagreements = field(default_factory=Disagreements)  # predicted fits, rejected

    def add(self, r: RequestRecord) -> None:
        p = self.predicted.by_turn.get((r.conversation, r.turn))
        if p is None:
            return
        row = self.outcomes.setdefault(p.fit.value, {})
        row[r.outcome.value] = row.get(r.outcome.value, 0) + 1
        if r.outcome is Outcome.CANCELLED:
            return
        if p.fit is Fit.NEVER_FITS and r.outcome is not Outcome.REJECTED and not clamped(r, p):
            self.unrejected.add(r)
        elif p.fit is Fit.FITS and r.outcome is Outcome.REJECTED and r.structured is None:
            # a structured request refused is refused for what it asked (an engine started without a tool parser,
            # a format it does not serve): rule structured_output says so, with the engine's words
            self.refused.add(r)

    def prediction(self, r: RequestRecord) -> Prediction:
        return self.predicted.by_turn[(r.conversation, r.turn)]


def clamped(r: RequestRecord, p: Prediction) -> bool:
    """A request longer than the longest sequence the target takes, served with its answer cut short at that
    length (llama.cpp, and vLLM releases that clamp max_tokens to what the context leaves): the engine admitted only
    what it holds, which is no disagreement with the arithmetic. A pool that can never hold a request has no such
    way out: serving it is the defect."""
    return (p.limit == MAX_LENGTH and r.outcome is Outcome.OK and r.finish_reason == "length"
            and r.completion_tokens is not None and r.completion_tokens < r.max_tokens)


def capacity_counts(predictions: Iterable[Prediction]) -> CapacityCounts | None:
    """Counts for a run with predictions; None for one without (the target's limits unknown)."""
    predicted = Predicted(predictions)
    return CapacityCounts(predicted) if predicted.by_turn else None
