"""Bounded counters a run's Tally keeps beside its latency sketches, for what rules and pictures read per request
when the records themselves were not all kept: prompt-length errors, the latest requests' end times, and how many
requests started and ended in each second. Each is the same whether it was filled as the run went or from the
records of a finished run, and none grows faster than the run's length in seconds."""

from __future__ import annotations

import dataclasses
from array import array
from dataclasses import dataclass

ERROR_SCALE = 10_000  # prompt-length errors are counted in 1/10,000ths of the planned length (rounded up)
ERROR_CAP = 4 * ERROR_SCALE  # errors beyond 400% share one count (the largest is kept exactly)
# A prompt counted shorter than planned by more than both is deeper than any calibration error goes: an engine cut
# it (llama.cpp cuts a prompt longer than a slot's context to about half of it).
CUT_SHARE, CUT_TOKENS = 0.25, 64
RECENT_ENDS = 50_000  # end times kept of the latest requests: about 0.9 MB


@dataclass(frozen=True, slots=True)
class Worst:
    """The request whose prompt was furthest off its planned length."""

    error: float  # (measured - planned) / planned
    request: int
    conversation: int
    turn: int
    planned: int
    measured: int


@dataclass(slots=True)
class PromptErrors:
    """Each counted prompt's (measured - planned) / planned, by size in 1/ERROR_SCALE rounded up: how many were off
    by more than a limit given to four decimals is exact, and a percentile is within 1/ERROR_SCALE of the exact
    lower rank."""

    count: int = 0
    total: float = 0.0  # of the signed errors: their mean is the bias
    by_size: dict[int, int] = dataclasses.field(default_factory=dict)
    worst: Worst | None = None
    # The prompts the target counted shorter than planned, by the same sizes: an engine that cuts a prompt longer
    # than its context answers a shorter one (rule prompt_truncated). `deep`: those shorter by more than CUT_SHARE
    # and CUT_TOKENS, deeper than a calibration error goes; `shortest`: the one cut the most.
    shorter: dict[int, int] = dataclasses.field(default_factory=dict)
    deep: dict[int, int] = dataclasses.field(default_factory=dict)
    shortest: Worst | None = None

    def add(self, request: int, conversation: int, turn: int, planned: int, measured: int) -> None:
        error = (measured - planned) / planned
        # Integer arithmetic, so that an error of exactly the limit is never counted beyond it.
        size = min(-(-abs(measured - planned) * ERROR_SCALE // planned), ERROR_CAP)
        self.count += 1
        self.total += error
        self.by_size[size] = self.by_size.get(size, 0) + 1
        worst = Worst(error, request, conversation, turn, planned, measured)
        if self.worst is None or abs(error) > abs(self.worst.error):
            self.worst = worst
        if measured < planned:
            self.shorter[size] = self.shorter.get(size, 0) + 1
            if planned - measured > CUT_TOKENS and size > CUT_SHARE * ERROR_SCALE:
                self.deep[size] = self.deep.get(size, 0) + 1
            if self.shortest is None or error < self.shortest.error:
                self.shortest = worst

    def beyond(self, limit: float) -> int:
        """How many were off by more than `limit` (a share of the planned length)."""
        scaled = round(limit * ERROR_SCALE)
        return sum(n for size, n in self.by_size.items() if size > scaled)

    def shorter_beyond(self, limit: float) -> tuple[int, float]:
        """How many the target counted shorter than planned by more than `limit`, and by how much their median
        was (0 when none were)."""
        return _with_median({size: n for size, n in self.shorter.items() if size > round(limit * ERROR_SCALE)})

    def cut_deep(self) -> tuple[int, float]:
        """How many were counted shorter by more than CUT_SHARE and CUT_TOKENS, and their median share."""
        return _with_median(self.deep)

    def percentile(self, q: float) -> float:
        """The size of error at percentile q (0..100), as the lower of the two nearest ranks."""
        rank = int(q / 100 * (self.count - 1))
        seen = 0
        for size in sorted(self.by_size):
            seen += self.by_size[size]
            if seen > rank:
                return abs(self.worst.error) if size == ERROR_CAP and self.worst else size / ERROR_SCALE
        return 0.0


def _with_median(sizes: dict[int, int]) -> tuple[int, float]:
    """How many counts of error sizes there are, and the median (lower) size as a share."""
    total = sum(sizes.values())
    half, seen = (total - 1) // 2, 0
    for size in sorted(sizes):
        seen += sizes[size]
        if seen > half:
            return total, size / ERROR_SCALE
    return 0, 0.0


@dataclass(slots=True)
class RecentEnds:
    """The end times of the latest RECENT_ENDS requests that ended on their own (not cancelled), each with whether
    it failed: engine death's "N/M requests ending after it" counts from these."""

    ends: array[int] = dataclasses.field(default_factory=lambda: array("q"))
    failed: array[int] = dataclasses.field(default_factory=lambda: array("b"))
    forgotten: int = 0  # ended earlier than every kept one, and no longer kept

    def add(self, end_ns: int, failed: bool) -> None:
        self.ends.append(end_ns)
        self.failed.append(failed)
        if len(self.ends) >= 2 * RECENT_ENDS:  # halve at once: one copy per RECENT_ENDS requests
            del self.ends[:RECENT_ENDS], self.failed[:RECENT_ENDS]
            self.forgotten += RECENT_ENDS

    def since(self, t_ns: int) -> tuple[int, int, bool]:
        """Of the requests kept that ended at or after t_ns: how many failed, how many there were, and whether
        that is all of them (False when requests were forgotten and the earliest kept ended after t_ns)."""
        later = [f for e, f in zip(self.ends, self.failed, strict=True) if e >= t_ns]
        complete = not self.forgotten or (len(later) < len(self.ends))
        return sum(later), len(later), complete


@dataclass(slots=True)
class PerSecond:
    """Requests sent and ended in each whole second since the load's time zero: the in-flight picture of a run
    whose records were not all kept (4 bytes a second per series)."""

    sent: array[int] = dataclasses.field(default_factory=lambda: array("I"))
    ended: array[int] = dataclasses.field(default_factory=lambda: array("I"))

    def add(self, sent_s: float | None, end_s: float) -> None:
        if sent_s is None:
            return
        _count(self.sent, sent_s)
        _count(self.ended, end_s)

    def in_flight(self) -> tuple[list[float], list[int]]:
        """Each second's start, and the requests sent and not yet ended when it was over (a step series)."""
        times, counts, level = [0.0], [0], 0
        for k in range(max(len(self.sent), len(self.ended))):
            level += (self.sent[k] if k < len(self.sent) else 0) - (self.ended[k] if k < len(self.ended) else 0)
            times.append(float(k))
            counts.append(level)
        return times, counts


def _count(series: array[int], t_s: float, by: int = 1) -> None:
    k = max(int(t_s), 0)
    if k >= len(series):
        series.extend([0] * (k + 1 - len(series)))
    series[k] += by


SLO_MISSES = ("ttft", "itl", "e2e", "failed")  # why a request missed the service level (it may miss several limits)


@dataclass(frozen=True, slots=True)
class SloTotals:
    """The service level's counts over a span of seconds."""

    requests: int
    met: int
    met_output_tokens: int
    missed: dict[str, int]  # by SLO_MISSES: requests that missed each limit, and the failed ones


@dataclass(slots=True)
class SloCounts:
    """Each whole second's requests (by when they were sent) judged against the service level: judged, met, the
    met ones' output tokens and the misses by limit, so that any span of the run (its steady state, a window) is
    judged exactly whether or not its records were kept (a few dozen bytes a second)."""

    requests: array[int] = dataclasses.field(default_factory=lambda: array("I"))
    met: array[int] = dataclasses.field(default_factory=lambda: array("I"))
    met_tokens: array[int] = dataclasses.field(default_factory=lambda: array("Q"))
    missed: dict[str, array[int]] = dataclasses.field(
        default_factory=lambda: {name: array("I") for name in SLO_MISSES})

    def add(self, sent_s: float, misses: tuple[str, ...], output_tokens: int) -> None:
        k = max(int(sent_s), 0)
        _count(self.requests, k)
        if misses:
            for name in misses:
                _count(self.missed[name], k)
        else:
            _count(self.met, k)
            _count(self.met_tokens, k, output_tokens)

    def between(self, from_s: int = 0, to_s: int | None = None) -> SloTotals:
        """The requests sent from second `from_s` up to (not including) `to_s` (None: the end)."""
        def total(series: array[int]) -> int:
            return sum(series[from_s:to_s])

        return SloTotals(total(self.requests), total(self.met), total(self.met_tokens),
                         {name: total(series) for name, series in self.missed.items()})
