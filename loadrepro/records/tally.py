"""Counts and latency sketches over every request and sample of a run, in windows: what the windows, the
report and the rules read, whether or not every record was kept in memory."""

from __future__ import annotations

import dataclasses
import itertools
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from ddsketch import DDSketch
from ddsketch.mapping import LogarithmicMapping

from loadrepro.config.capacity import Prediction
from loadrepro.config.profile import SloSpec
from loadrepro.config.workload_spec import UNCHECKED_FORMATS
from loadrepro.records.capacity_counts import CapacityCounts, capacity_counts
from loadrepro.records.counts import PerSecond, PromptErrors, RecentEnds, SloCounts
from loadrepro.records.memory import MemorySample
from loadrepro.records.vocabulary import (
    FAILED,
    KV_USAGE,
    PREEMPTIONS,
    RUNNING,
    WAITING,
    CanarySample,
    HealthSample,
    MetricsSample,
    Outcome,
    RequestRecord,
    Sample,
)

REUSE_SCALE = 10_000  # the share of a prefix found cached is counted in 1/10,000ths (Tally.reuse)
SKETCH_ACCURACY = 0.01  # relative accuracy of the latency sketches: a reported p95 is within 1% of the true one
_MAPPING = LogarithmicMapping(SKETCH_ACCURACY)  # DDSketch's own default mapping: the buckets its sketches use
_LOG_GAMMA = float(np.log(_MAPPING.gamma))


def _sketch() -> DDSketch:
    return DDSketch(SKETCH_ACCURACY)


def _keys(values: np.ndarray) -> np.ndarray:
    keys: np.ndarray = np.ceil(np.log(np.maximum(values, 1e-6)) / _LOG_GAMMA).astype(np.int64)
    return keys


def _add_keys(sketch: DDSketch, keys: np.ndarray) -> None:
    """One `add` per bucket the keys fall in, with their count, of the value DDSketch reads that bucket back as: the
    sketch answers as if each value had been added (up to a value on a bucket's very edge)."""
    if not len(keys):
        return
    low = int(keys.min())
    counts = np.bincount(keys - low)
    for offset in np.flatnonzero(counts).tolist():
        sketch.add(_MAPPING.value(low + offset), int(counts[offset]))


_GAPS_WAITING = 1 << 16  # gaps a BulkSketch holds before it adds them (0.5 MB of int64 when they go in)


@dataclass(slots=True)
class BulkSketch:
    """A DDSketch of the gaps between each stream's chunk times, fed a stream's times at a time. The times wait,
    and go into the sketch at once (their gaps' bucket keys computed together, then one `add` per bucket) when it
    is read or when _GAPS_WAITING gaps are waiting: adding each stream's keys bucket by bucket was a tenth of a fast
    stream's CPU (benchmarks/client_overhead.py), and computing each stream's gaps and keys with numpy on its own
    (eight calls on some 128 values) was 3% of a fast run's."""

    _sketch: DDSketch = dataclasses.field(default_factory=_sketch)
    _waiting: list[Sequence[int]] = dataclasses.field(default_factory=list)
    _count: int = 0

    def add_gaps(self, times_ns: Sequence[int]) -> None:
        """The gaps between consecutive times, in ms (nothing for fewer than two times)."""
        if len(times_ns) > 1:
            self._waiting.append(times_ns)
            self._count += len(times_ns) - 1
            if self._count >= _GAPS_WAITING:
                self._flush()

    @property
    def sketch(self) -> DDSketch:
        """The sketch of every gap added so far."""
        self._flush()
        return self._sketch

    def _flush(self) -> None:
        if self._waiting:
            _add_keys(self._sketch, _keys(_gaps_ms(self._waiting, self._count)))
            self._waiting, self._count = [], 0


def _gaps_ms(streams: list[Sequence[int]], gaps: int) -> np.ndarray:
    """The gaps within each stream, not between one stream's last time and the next one's first."""
    times = np.fromiter(itertools.chain.from_iterable(streams), np.int64, gaps + len(streams))
    within = np.ones(len(times) - 1, dtype=bool)
    within[np.cumsum([len(s) for s in streams[:-1]], dtype=np.int64) - 1] = False
    return np.diff(times)[within] / 1e6


@dataclass(slots=True)
class WindowTally:
    """One window's counts and latency sketches, over every request sent in it, and what every scrape of the
    engine's metrics taken in it said (so the samples themselves may be coarsened)."""

    requests: int = 0
    outcomes: dict[str, int] = dataclasses.field(default_factory=dict)
    sent: int = 0  # of its requests, those sent (not cancelled while queued)
    ended: int = 0  # requests sent at any time that ended in this window
    due: int = 0  # requests loadrepro wanted to send in this window (sent then or later, or never)
    dropped: int = 0  # requests never sent (cancelled while they waited in loadrepro) that ended in this window
    ttft_ms: DDSketch = dataclasses.field(default_factory=_sketch)
    itl: BulkSketch = dataclasses.field(default_factory=BulkSketch)  # read as itl_ms
    kv_usage_max: float | None = None
    kv_usage_quiet: float | None = None  # the lowest KV usage while nothing ran or waited
    waiting_max: float | None = None
    preemptions_low: float | None = None  # the engine's preemption counter, lowest and highest seen
    preemptions_high: float | None = None
    memory_mb: float | None = None  # the engine's resident memory at the last reading in the window

    @property
    def itl_ms(self) -> DDSketch:
        return self.itl.sketch

    def scraped(self, values: dict[str, float]) -> None:
        """One scrape of the engine's canonical metrics."""
        if (usage := values.get(KV_USAGE)) is not None:
            self.kv_usage_max = _higher(self.kv_usage_max, usage)
            if quiet(values):
                self.kv_usage_quiet = _lower(self.kv_usage_quiet, usage)
        if (waiting := values.get(WAITING)) is not None:
            self.waiting_max = _higher(self.waiting_max, waiting)
        if (preempted := values.get(PREEMPTIONS)) is not None:
            self.preemptions_low = _lower(self.preemptions_low, preempted)
            self.preemptions_high = _higher(self.preemptions_high, preempted)


def quiet(values: dict[str, float]) -> bool:
    """A scrape at a quiet moment: the engine ran nothing and had nothing waiting (the KV it held then is held by
    nothing: kv_leak, and a fault's recovery)."""
    return values.get(RUNNING) == 0 and values.get(WAITING, 0) == 0


def _higher(kept: float | None, value: float) -> float:
    return value if kept is None else max(kept, value)


def _lower(kept: float | None, value: float) -> float:
    return value if kept is None else min(kept, value)


@dataclass(slots=True)
class ReplicaTally:
    """One replica's requests ([target] replicas): counted over every record, kept in memory or not."""

    by_outcome: dict[str, int] = dataclasses.field(default_factory=dict)
    ttft_ms: DDSketch = dataclasses.field(default_factory=_sketch)
    last_ok_ns: int | None = None  # when its latest completed request ended

    def add(self, r: RequestRecord) -> None:
        self.by_outcome[r.outcome.value] = self.by_outcome.get(r.outcome.value, 0) + 1
        if r.ttft_ms is not None:
            self.ttft_ms.add(max(r.ttft_ms, 1e-6))
        if r.outcome is Outcome.OK:
            self.last_ok_ns = max(self.last_ok_ns or r.end_ns, r.end_ns)

    @property
    def requests(self) -> int:
        return sum(self.by_outcome.values())


@dataclass(slots=True)
class Tally:
    """Exact counts and mergeable latency sketches (DDSketch, a kept library) over every record of a run, whether
    or not the record is kept in memory: a soak keeps only its first records and its failures, so its memory is
    bounded by the run's shape, not its length. Every latency a report shows comes from here, records kept or
    not: one path, within SKETCH_ACCURACY of the exact value (the lower of the two nearest ranks).
    requests.jsonl has every record."""

    window_s: float
    start_ns: int = 0
    slo: SloSpec = SloSpec()  # each request judged against it as it is counted (no limit set: none judged)
    requests: int = 0
    conversations: int = 0  # conversations started: requests of a first turn
    dropped: int = 0  # records not kept in memory
    thinned: int = 0  # watcher samples not kept in memory (load/recorder.py)
    by_outcome: dict[str, int] = dataclasses.field(default_factory=dict)
    retries: int = 0
    reconnects: int = 0
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    # (conversation, turn) of each request that did not answer (cancelled apart), and how often: its conversation's
    # later turns were not sent (load/arrivals.py); bounded by the planned requests, a soak's passes counted
    ended_early: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)
    output_tokens: int = 0
    e2e_ms: DDSketch = dataclasses.field(default_factory=_sketch)
    queue_ms: DDSketch = dataclasses.field(default_factory=_sketch)
    ttfc_ms: DDSketch = dataclasses.field(default_factory=_sketch)
    windows: dict[int, WindowTally] = dataclasses.field(default_factory=dict)
    # Later turns that completed with a shared prefix, by the share of it found cached (in 1/REUSE_SCALE, floored):
    # each share's count and its first request (id, cached, shared). Judging `cached < min_cache_hit x shared` from
    # these is exact for a min_cache_hit given to four decimals.
    reuse: dict[int, tuple[int, int, int, int]] = dataclasses.field(default_factory=dict)
    reuse_reported: int = 0  # of those, the ones whose usage reported cached tokens at all
    # Every completed request (any turn): the planned tokens a perfect prefix cache could have served it, and the
    # cached tokens its usage reported when it could be served some (None: none reported) -- report.json
    # workload.prefix_reuse. A turn sent where its prefix never was (another replica, an engine restarted since)
    # could be served none (load/routed_turns.py, load/faults.py).
    reuse_possible: int = 0
    reuse_cached: int | None = None
    reuse_own: int | None = None  # agent traces: of reuse_possible, what each request's own tree sent before
    prompt_errors: PromptErrors = dataclasses.field(default_factory=PromptErrors)
    recent_ends: RecentEnds = dataclasses.field(default_factory=RecentEnds)
    per_second: PerSecond = dataclasses.field(default_factory=PerSecond)
    health_ms: DDSketch = dataclasses.field(default_factory=_sketch)  # every /health poll's latency
    last_end_ns: int = 0  # when the latest request ended, whatever its outcome
    canaries: int = 0
    canary_outcomes: dict[str, int] = dataclasses.field(default_factory=dict)
    canary_ttft_ms: DDSketch = dataclasses.field(default_factory=_sketch)
    slo_counts: SloCounts = dataclasses.field(default_factory=SloCounts)
    structured: int = 0  # completed requests that asked for a structured answer
    structured_cut: int = 0  # of those, cut at max_tokens (not judged)
    structured_unparsed: int = 0  # of those that ended on their own, the ones whose answer was not what was asked
    structured_unchecked: int = 0  # of those that ended on their own, the ones no check exists for (a grammar's)
    first_unparsed: tuple[int, str] | None = None  # the first such request's id and answer's first words
    structured_refused: int = 0  # requests that asked for a structured answer and were refused (4xx)
    first_refused: tuple[int, str] | None = None  # the first such request's id and the refusal's first words
    replicas: dict[int, ReplicaTally] = dataclasses.field(default_factory=dict)  # by replica (0: the target)
    # Speculative decoding: each drafting request's drafted and accepted tokens, in the order they ended (8 bytes
    # a request: a soak's whole run, not its kept records).
    drafted: array[int] = dataclasses.field(default_factory=lambda: array("i"))
    accepted: array[int] = dataclasses.field(default_factory=lambda: array("i"))
    capacity: CapacityCounts | None = None  # with the target's limits known: how each prediction fared

    @classmethod
    def of(cls, records: Iterable[RequestRecord], start_ns: int, window_s: float,
           samples: Iterable[Sample] = (), slo: SloSpec | None = None,
           predictions: Iterable[Prediction] = ()) -> Tally:
        """The tally of records and samples at hand (a result built from all of them)."""
        tally = cls(window_s, start_ns, slo or SloSpec(), capacity=capacity_counts(predictions))
        for r in records:
            tally.add(r)
        for sample in samples:
            tally.sampled(sample)
        return tally

    def sampled(self, sample: Sample) -> None:
        """A watcher's sample: a scrape of the engine's metrics into its window (none before the load's time
        zero), a /health poll's latency, a canary's outcome and time to its token, the engine's memory."""
        match sample:
            case MetricsSample() if sample.t_ns >= self.start_ns:
                self._window(sample.t_ns).scraped(sample.values)
            case MemorySample() if sample.t_ns >= self.start_ns:
                self._window(sample.t_ns).memory_mb = round(sample.rss_bytes / 2**20, 1)
            case HealthSample():
                self.health_ms.add(max(sample.latency_ns / 1e6, 1e-6))
            case CanarySample():
                self.canaries += 1
                self.canary_outcomes[sample.outcome] = self.canary_outcomes.get(sample.outcome, 0) + 1
                if sample.ttft_ns is not None:
                    self.canary_ttft_ms.add(max(sample.ttft_ns / 1e6, 1e-6))

    # TTFT and ITL go into their window's sketch only, and the run's are those merged when asked for: a DDSketch
    # merge of sketches with one mapping is exact, and adding each value once halves the per-record work.
    @property
    def ttft_ms(self) -> DDSketch:
        return _merged(w.ttft_ms for w in self.windows.values())

    @property
    def itl_ms(self) -> DDSketch:
        return _merged(w.itl_ms for w in self.windows.values())

    def _window(self, t_ns: int) -> WindowTally:
        """The window a time falls in, made when first needed (not made to be thrown away, as setdefault's default
        is: its sketches were a fifth of adding a record)."""
        i = self.window_of(t_ns)
        window = self.windows.get(i)
        if window is None:
            window = self.windows[i] = WindowTally()
        return window

    def window_of(self, t_ns: int) -> int:
        """The 0-based window a time falls in."""
        return int((t_ns - self.start_ns) / 1e9 // self.window_s)

    def add(self, r: RequestRecord) -> None:
        self.requests += 1
        if r.draft_tokens and r.draft_accepted is not None:
            self.drafted.append(r.draft_tokens)
            self.accepted.append(r.draft_accepted)
        self.last_end_ns = max(self.last_end_ns, r.end_ns)
        self.conversations += r.turn == 1
        self.by_outcome[r.outcome.value] = self.by_outcome.get(r.outcome.value, 0) + 1
        if r.outcome not in (Outcome.OK, Outcome.CANCELLED):
            self.ended_early[r.conversation, r.turn] = self.ended_early.get((r.conversation, r.turn), 0) + 1
        replica = self.replicas.get(r.replica)
        if replica is None:
            replica = self.replicas[r.replica] = ReplicaTally()
        replica.add(r)
        self.retries, self.reconnects = self.retries + r.retries, self.reconnects + r.reconnects
        self.prompt_tokens += r.prompt_tokens or 0
        if r.cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + r.cached_tokens
        self.output_tokens += r.completion_tokens if r.completion_tokens is not None else len(r.chunk_ns)
        if r.outcome is Outcome.OK:
            self.reuse_possible += r.shared_prefix_tokens
            if r.own_prefix_tokens is not None:
                self.reuse_own = (self.reuse_own or 0) + r.own_prefix_tokens
            if r.cached_tokens is not None:  # what it shares nothing of (as far as it knows) is not its reuse
                self.reuse_cached = (self.reuse_cached or 0) + (r.cached_tokens if r.shared_prefix_tokens else 0)
        if r.outcome is Outcome.OK and r.shared_prefix_tokens > 0 and r.turn > 1:
            self._reused(r)
        if self.capacity is not None:
            self.capacity.add(r)
        if r.prompt_tokens is not None and r.expected_prompt_tokens > 0:
            self.prompt_errors.add(r.id, r.conversation, r.turn, r.expected_prompt_tokens, r.prompt_tokens)
        if r.outcome is not Outcome.CANCELLED:
            self.recent_ends.add(r.end_ns, r.outcome in FAILED)
        self.per_second.add(None if r.sent_ns is None else (r.sent_ns - self.start_ns) / 1e9,
                            (r.end_ns - self.start_ns) / 1e9)
        window = self._window(r.sent_or_queued_ns)
        window.requests += 1
        self._window(r.queued_ns).due += 1
        ending = self._window(r.end_ns)
        if r.sent_ns is not None:
            window.sent += 1
            ending.ended += 1
        else:
            ending.dropped += 1
        window.outcomes[r.outcome.value] = window.outcomes.get(r.outcome.value, 0) + 1
        for sketch, value in ((self.e2e_ms, r.e2e_ms), (self.queue_ms, r.queue_ms), (window.ttft_ms, r.ttft_ms),
                              (self.ttfc_ms, r.ttfc_ms)):
            if value is not None:
                sketch.add(max(value, 1e-6))
        window.itl.add_gaps(r.chunk_ns)
        if r.structured is not None and r.outcome is Outcome.REJECTED:
            self.structured_refused += 1
            if self.first_refused is None or r.id < self.first_refused[0]:
                self.first_refused = (r.id, r.detail[:200])
        elif r.structured is not None:
            self._structured(r)
        if self.slo.limits and r.outcome not in SLO_UNJUDGED:
            self.slo_counts.add((r.sent_or_queued_ns - self.start_ns) / 1e9, slo_misses(r, self.slo),
                                r.completion_tokens if r.completion_tokens is not None else len(r.chunk_ns))


    def _structured(self, r: RequestRecord) -> None:
        self.structured += 1
        self.structured_cut += r.finish_reason == "length"
        self.structured_unchecked += r.finish_reason != "length" and r.structured in UNCHECKED_FORMATS
        if r.unparsed is not None:
            self.structured_unparsed += 1
            if self.first_unparsed is None or r.id < self.first_unparsed[0]:
                self.first_unparsed = (r.id, r.unparsed)

    def _reused(self, r: RequestRecord) -> None:
        cached = r.cached_tokens or 0
        share = cached * REUSE_SCALE // r.shared_prefix_tokens
        count, first_id, first_cached, first_shared = self.reuse.get(share, (0, r.id, cached, r.shared_prefix_tokens))
        if r.id < first_id:
            first_id, first_cached, first_shared = r.id, cached, r.shared_prefix_tokens
        self.reuse[share] = (count + 1, first_id, first_cached, first_shared)
        self.reuse_reported += r.cached_tokens is not None


# Requests the service level does not judge: cancelled by loadrepro (on purpose, or never sent) and failed by a
# fault loadrepro caused: neither is the engine serving its users.
SLO_UNJUDGED = frozenset({Outcome.CANCELLED, Outcome.FAULTED})


def slo_misses(r: RequestRecord, slo: SloSpec) -> tuple[str, ...]:
    """The limits a request missed (counts.SLO_MISSES; empty: it met the service level). A failed request misses
    it whatever its latency; a request without a first token timed (not streamed) is judged by its end."""
    if r.outcome is not Outcome.OK:
        return ("failed",)
    ttft, e2e = r.ttft_ms, r.e2e_ms or 0.0
    itl = r.mean_itl_ms or 0.0
    measured = {"ttft": ttft if ttft is not None else e2e, "itl": itl, "e2e": e2e}
    return tuple(name for name, limit in slo.limits.items() if measured[name] > limit)


def _merged(sketches: Iterable[DDSketch]) -> DDSketch:
    merged = _sketch()
    for sketch in sketches:
        merged.merge(sketch)
    return merged
