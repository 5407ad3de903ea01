"""What a run observed, kept as it happens: every request record and watcher sample goes to the run directory's
JSONL files (written by threads, see records.JsonlWriter), so that a crash loses only what was still in flight.
In memory: the records up to `keep` completed ones plus up to `keep` others (failures are what rules look at one
by one), and the samples, each kind bounded by MAX_SAMPLES: metrics scrapes coarsened (pairs merged, each series
at its highest), long stretches of fast 200 /health polls reduced to their ends, every other successful canary
let go. Every record and sample, kept or not, is counted in the Tally, which the windows and the report read."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from loadrepro.config.capacity import Prediction
from loadrepro.config.profile import Profile, SloSpec
from loadrepro.records import (
    ENGINE_RSS,
    CanarySample,
    EndpointSample,
    Fault,
    FaultNotCaused,
    HealthSample,
    JsonlWriter,
    LogMatch,
    MemorySample,
    MetricsSample,
    Note,
    Outcome,
    ReplicaExit,
    RequestRecord,
    RunEnd,
    Sample,
    Tally,
)
from loadrepro.records.capacity_counts import capacity_counts

MAX_SAMPLES = 20_000  # of each kind kept in memory (a metrics scrape ~1 KB); a 12-hour soak polling every 0.5 s
# makes 86,400
EDGE_POLLS = 3  # polls kept at each end of a stretch of fast 200s: rules look up to 2 polls past a failure


class Reservoir:
    """A uniform sample of at most `size` of the items offered (Vitter's algorithm R), seeded: the same run keeps
    the same ones. Ten lines, where a library would bring a dependency for them."""

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size, self._seen = size, 0
        self.items: list[RequestRecord] = []
        self._rng = random.Random(seed)

    def offer(self, item: RequestRecord) -> None:
        self._seen += 1
        if len(self.items) < self.size:
            self.items.append(item)
        elif (k := self._rng.randrange(self._seen)) < self.size:
            self.items[k] = item


class _Unwritten:
    """Where a run replayed from its own files writes: nowhere (runs/rebuild.py)."""

    def write(self, item: object) -> None:
        pass

    def close(self) -> None:
        pass


class Recorder:
    def __init__(self, out_dir: Path | None, window_s: float = 60.0, keep: int = 20_000, fast_health_s: float = 1.0,
                 answers: int = 0, slo: SloSpec | None = None, rss_from_metrics: bool = False,
                 predictions: Sequence[Prediction] = ()) -> None:
        """`out_dir` None: nothing is written (a run replayed from its files keeps what the run kept).
        fast_health_s: a 200 /health poll that answered within it is one no health rule singles out. `answers`:
        completed requests with an answer to keep a uniform sample of, beyond `keep` ([verify] checks them), cache
        hits and the others apart, since answers are checked cache hits first. `rss_from_metrics`: the engine's
        memory is read from the resident memory its scrapes publish (a target at a URL: /proc is not ours).
        `predictions`: each planned request's capacity prediction, whose outcomes are counted over every record."""
        self.records: list[RequestRecord] = []
        self.answer_pool = {True: Reservoir(answers, 1), False: Reservoir(answers, 2)}  # by cache hit
        self.tally = Tally(window_s, slo=slo or SloSpec(), capacity=capacity_counts(predictions))
        self.last: RequestRecord | None = None
        self._keep = keep
        self._kept = {True: 0, False: 0}  # completed, other
        self._fast_health_ns = fast_health_s * 1e9
        self.health: list[HealthSample] = []
        self.metrics: list[MetricsSample] = []
        self.matches: list[LogMatch] = []
        self.notes: list[Note] = []
        self.canaries: list[CanarySample] = []
        self.memory: list[MemorySample] = []
        self.rss_from_metrics = rss_from_metrics
        self.watched: dict[str, tuple[list[HealthSample], list[MetricsSample]]] = {}  # by endpoint name
        self._requests_out: JsonlWriter | _Unwritten = _Unwritten()
        self._samples_out: JsonlWriter | _Unwritten = _Unwritten()
        if out_dir is not None:
            self._requests_out = JsonlWriter(out_dir / "requests.jsonl")
            self._samples_out = JsonlWriter(out_dir / "samples.jsonl")

    @classmethod
    def of_run(cls, profile: Profile, out_dir: Path | None, rss_from_metrics: bool,
               predictions: Sequence[Prediction] = ()) -> Recorder:
        """What a run of `profile` keeps in memory: the run's own recorder, and the one its files are replayed
        through when its reports are rebuilt."""
        watch, limit = profile.watch, profile.verdict.max_health_latency_s
        fast_s = min(watch.health_timeout_s, watch.liveness_timeout_s, *([limit] if limit > 0 else []))
        verify = profile.verify
        answers = 0 if verify.outputs == "off" else verify.sample if verify.outputs == "sample" else \
            profile.load.keep_records
        return cls(out_dir, profile.verdict.window_s, profile.load.keep_records, fast_s, answers, profile.slo,
                   rss_from_metrics, predictions)

    def started(self, start_ns: int) -> None:
        """The load's time zero, from which windows are counted."""
        self.tally.start_ns = start_ns

    def record(self, record: RequestRecord) -> None:
        self._requests_out.write(record)
        self.tally.add(record)
        self.last = record
        ok = record.outcome is Outcome.OK
        if ok and record.answer is not None:
            self.answer_pool[(record.cached_tokens or 0) > 0].offer(record)
        if self._kept[ok] >= self._keep:
            self.tally.dropped += 1
            return
        self._kept[ok] += 1
        self.records.append(record)

    def sample(self, sample: Sample) -> None:
        self._samples_out.write(sample)
        self.tally.sampled(sample)
        match sample:
            case HealthSample():
                self.health.append(sample)
                if len(self.health) > MAX_SAMPLES:
                    before, self.health = len(self.health), quiet_stretches_cut(self.health, self._fast_health_ns)
                    self.tally.thinned += before - len(self.health)
            case MetricsSample():
                if self.rss_from_metrics and (rss := sample.values.get(ENGINE_RSS)) is not None:
                    self.sample(MemorySample(sample.t_ns, int(rss), None, None, sum(self.tally.by_outcome.values()), 0))
                self.metrics.append(sample)
                if len(self.metrics) > MAX_SAMPLES:
                    before, self.metrics = len(self.metrics), coarsened(self.metrics)
                    self.tally.thinned += before - len(self.metrics)
            case LogMatch():
                self.matches.append(sample)
            case Note():
                self.notes.append(sample)
            case CanarySample():
                self.canaries.append(sample)
                if len(self.canaries) > MAX_SAMPLES:
                    before, self.canaries = len(self.canaries), fewer_successes(self.canaries)
                    self.tally.thinned += before - len(self.canaries)
            case MemorySample():
                self.memory.append(sample)
                if len(self.memory) > MAX_SAMPLES:  # a soak's: every other kept, the last always (its end)
                    before, self.memory = len(self.memory), [*self.memory[:-1:2], self.memory[-1]]
                    self.tally.thinned += before - len(self.memory)

    def endpoint_sample(self, sample: EndpointSample) -> None:
        """A watched endpoint's sample ([[watch.endpoints]], a replica's, the introspection path's), kept beside the
        target's (thinned alike)."""
        self._samples_out.write(sample)
        health, metrics = self.watched.setdefault(sample.endpoint, ([], []))
        match sample.sample:
            case HealthSample():
                health.append(sample.sample)
                if len(health) > MAX_SAMPLES:
                    health[:] = quiet_stretches_cut(health, self._fast_health_ns)
            case MetricsSample():
                metrics.append(sample.sample)
                if len(metrics) > MAX_SAMPLES:
                    metrics[:] = coarsened(metrics)

    def written(self, event: Fault | FaultNotCaused | ReplicaExit | RunEnd) -> None:
        """What the runner keeps of its own (a fault on purpose, one not caused, a replica's exit, how the run
        ended), written to samples.jsonl as it happens, so that a rebuilt report judges it too."""
        self._samples_out.write(event)

    def sampled_answers(self) -> tuple[RequestRecord, ...]:
        """When records were dropped, the uniform samples of the whole run's completed requests with answers (the
        kept records are the first ones only); else none: the kept records are all of them."""
        if not self.tally.dropped:
            return ()
        return tuple(sorted((r for pool in self.answer_pool.values() for r in pool.items), key=lambda r: r.id))

    def close(self) -> None:
        """Waits for the writers to finish their files."""
        self._requests_out.close()
        self._samples_out.close()


def coarsened(samples: list[MetricsSample]) -> list[MetricsSample]:
    """About half as many scrapes: the first and the last as they are, the others merged in pairs, each at the
    later time with every series at its higher value (peaks, and counters' latest values, survive; what only a
    low point would show, KV usage at quiet moments, the tally has counted)."""
    first, middle, last = samples[0], samples[1:-1], samples[-1]
    merged = [MetricsSample(b.t_ns, {k: max(x.values[k] for x in (a, b) if k in x.values)
                                     for k in a.values.keys() | b.values.keys()}, b.in_flight)
              for a, b in zip(middle[::2], middle[1::2], strict=False)]
    if len(middle) % 2:
        merged.append(middle[-1])
    return [first, *merged, last]


def quiet_stretches_cut(polls: list[HealthSample], fast_ns: float) -> list[HealthSample]:
    """Each stretch of polls that answered 200 within fast_ns, kept only at its ends (EDGE_POLLS each): every
    failing or slow poll, every change of status and the polls around them stay, so rules read them alike."""
    kept: list[HealthSample] = []
    stretch: list[HealthSample] = []
    for poll in [*polls, None]:
        if poll is not None and poll.healthy and poll.latency_ns <= fast_ns:
            stretch.append(poll)
            continue
        kept += stretch if len(stretch) <= 2 * EDGE_POLLS else stretch[:EDGE_POLLS] + stretch[-EDGE_POLLS:]
        stretch = []
        if poll is not None:
            kept.append(poll)
    if len(kept) > MAX_SAMPLES:  # hours of failing or slow polls: every other one of the older half goes
        kept = [p for i, p in enumerate(kept) if i % 2 == 0 or i >= len(kept) // 2]
    return kept


def fewer_successes(canaries: list[CanarySample]) -> list[CanarySample]:
    """Every canary that got nothing (what a rule reads), and every other one that answered (the picture's)."""
    ok = 0
    kept = []
    for canary in canaries:
        ok += canary.ok
        if not canary.ok or ok % 2:
            kept.append(canary)
    return kept
