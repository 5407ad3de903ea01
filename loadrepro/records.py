"""What a run observed: one RequestRecord per request, watcher samples, and the RunResult that holds them.

Times are integers in nanoseconds from `time.perf_counter_ns()` (suffix `_ns`), plus one wall-clock timestamp
per record. Records and samples are appended to JSONL files as they happen, so a crash loses only what was
still in flight.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
from ddsketch import DDSketch
from ddsketch.mapping import LogarithmicMapping

from loadrepro.capacity import EngineLimits, Prediction
from loadrepro.counts import PerSecond, PromptErrors, RecentEnds
from loadrepro.profile import OUTAGES, BackendName, ChaosAction, VerifySpec, WatchSpec


class Outcome(StrEnum):
    OK = "ok"
    REJECTED = "rejected"
    THROTTLED = "throttled"
    SERVER_ERROR = "server_error"
    STREAM_ERROR = "stream_error"
    TRUNCATED = "truncated"
    PROTOCOL_ERROR = "protocol_error"
    STALLED = "stalled"
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"
    CANCELLED = "cancelled"
    FAULTED = "faulted"  # failed while a fault loadrepro caused on purpose ([[chaos.events]]) was in effect


FAILED = frozenset({Outcome.SERVER_ERROR, Outcome.STREAM_ERROR, Outcome.TRUNCATED, Outcome.PROTOCOL_ERROR,
                    Outcome.STALLED, Outcome.TIMEOUT, Outcome.UNREACHABLE})  # the engine's failures, by outcome


@dataclass(frozen=True, slots=True)
class Answer:
    """What a request answered, as evidence to compare ([verify]): its first output tokens, each with its logprob
    and the runner-up's, and the start of its text. Bounded whatever the answer's length."""

    text: str  # the content (reasoning and tool calls apart), its first ANSWER_CHARS characters
    chars: int  # the content's whole length
    tokens: tuple[str, ...] = ()  # the first compare_tokens output tokens, from the logprobs; () without them
    logprobs: tuple[float, ...] = ()  # each token's
    runner_up: tuple[float | None, ...] = ()  # the best other token's at each position (None: none was given)
    runner_token: tuple[str, ...] = ()  # that token

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        return cls(str(data["text"]), int(data["chars"]), tuple(data["tokens"]), tuple(data["logprobs"]),
                   tuple(data["runner_up"]), tuple(data["runner_token"]))

    def margin(self, position: int) -> float | None:
        """How far the chosen token led its runner-up at `position`, in nats."""
        other = self.runner_up[position] if position < len(self.runner_up) else None
        return None if other is None else self.logprobs[position] - other


ANSWER_CHARS = 4096


@dataclass(frozen=True, slots=True)
class AnswerCheck:
    """One answer under load judged against the same request sent alone afterwards ([verify])."""

    request: int
    conversation: int
    turn: int
    kind: str  # identical | near_tie | diverged | garbled | cross_talk | unverifiable
    position: int | None = None  # the first output position where they differ
    load_token: str = ""  # there, under load ("" past the end of the answer)
    reference_token: str = ""  # there, alone
    margin: float | None = None  # nats by which the reference's token led its runner-up there
    cached_tokens: int | None = None  # the load request's, as its usage reported
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    id: int
    conversation: int
    turn: int
    outcome: Outcome
    detail: str  # the target's error text (first 4 KiB) or why the outcome was chosen; "" when ok
    status: int | None
    wall_time: float  # time.time() when the request was queued
    queued_ns: int  # when the runner wanted to send it
    sent_ns: int | None
    first_byte_ns: int | None
    first_token_ns: int | None  # the first token of any kind: reasoning, tool-call arguments or content
    end_ns: int
    chunk_ns: tuple[int, ...]  # arrival of each chunk that carried a token, of any kind
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    expected_prompt_tokens: int
    shared_prefix_tokens: int
    max_tokens: int
    retries: int = 0
    signature: str | None = None  # catalog name of the error text, when it matched
    reconnects: int = 0  # times resent at once because a pooled connection turned out closed (not an outcome)
    signature_class: str | None = None  # F, P, T or R: the class of `signature`, built-in or the profile's
    first_content_ns: int | None = None  # the first content token (after any reasoning or tool-call tokens)
    answer: Answer | None = None  # [verify] on: the evidence its answer is compared by
    streamed: bool = True  # False: it asked for the whole answer at once (no first token, no chunks to time)

    # The latencies of one request, defined here only: the report, the windows, the tally and the timeline read them.
    @property
    def ttft_ms(self) -> float | None:
        """Sent -> its first token of any kind."""
        return _ms(self.sent_ns, self.first_token_ns)

    @property
    def ttfc_ms(self) -> float | None:
        """Sent -> its first content token (later than TTFT when reasoning or a tool call comes first)."""
        return _ms(self.sent_ns, self.first_content_ns)

    @property
    def e2e_ms(self) -> float | None:
        """Sent -> its end, whatever the outcome; None when it was never sent."""
        return _ms(self.sent_ns, self.end_ns)

    @property
    def queue_ms(self) -> float | None:
        """Queued -> sent: waiting for a concurrency slot inside loadrepro."""
        return max(0.0, (self.sent_ns - self.queued_ns) / 1e6) if self.sent_ns is not None else None

    def itl_ms(self) -> np.ndarray:
        """The gaps between consecutive chunks that carried tokens."""
        return np.diff(np.asarray(self.chunk_ns, dtype=np.int64)) / 1e6

    @property
    def sent_or_queued_ns(self) -> int:
        """When it was sent (queued, when never sent): the time that places it in a window."""
        return self.sent_ns if self.sent_ns is not None else self.queued_ns

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        data = {k: v for k, v in data.items() if k != "kind"}
        answer = Answer.from_json(data["answer"]) if data.get("answer") else None
        return cls(**{**data, "outcome": Outcome(data["outcome"]), "chunk_ns": tuple(data["chunk_ns"]),
                      "answer": answer})


def _ms(start_ns: int | None, end_ns: int | None) -> float | None:
    return (end_ns - start_ns) / 1e6 if start_ns is not None and end_ns is not None else None


@dataclass(frozen=True, slots=True)
class HealthSample:
    t_ns: int  # when the answer came (or the poll was given up): when the status was known
    status: int | str  # an HTTP status code, or "unreachable"
    latency_ns: int  # how long the poll took: it was sent at t_ns - latency_ns

    @property
    def healthy(self) -> bool:
        return self.status == 200


# Canonical metrics series: every engine's families are mapped to these when scraped (drive/watch/metrics.py).
KV_USAGE, RUNNING, WAITING, PREEMPTIONS = "kv_usage", "running", "waiting", "preemptions"
CACHE_HITS, CACHE_QUERIES = "prefix_cache_hits", "prefix_cache_queries"
POOL_USAGE = "pool_usage:"  # + a pool's name: the share of its blocks in use (the simulated engine's pools)


@dataclass(frozen=True, slots=True)
class MetricsSample:
    t_ns: int
    values: dict[str, float]  # canonical series (drive/watch/metrics.py) -> value: kv_usage, running, waiting, ...
    in_flight: int | None = None  # loadrepro's requests in flight when the scrape was sent (None: not known)


@dataclass(frozen=True, slots=True)
class LogMatch:
    t_ns: int
    line_number: int
    signature: str
    klass: str
    line: str


@dataclass(frozen=True, slots=True)
class CanarySample:
    """One canary ([watch] canary_interval_s): a salted one-token request outside the workload."""

    t_ns: int  # sent
    end_ns: int
    outcome: str  # an Outcome's value
    ttft_ns: int | None  # sent -> its token
    detail: str
    progress_ns: int  # the last moment the engine was seen making progress, when the canary ended
    signature: str | None = None  # catalog name of its error text

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.OK.value


class StopReason(StrEnum):
    """Why a run's load stopped (report.json's stop_reason)."""

    DONE = "done"  # every planned request was sent
    DURATION = "duration"  # [load] duration_s ran out
    SATURATED = "saturated"  # [load] stop_when_saturated
    ENGINE_DEATH = "engine_death"  # the engine died ([load] stop_on_death)
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM
    WORKER_CRASHED = "worker_crashed"  # a load worker of loadrepro's failed
    RUNNING = "running"  # not stopped: a snapshot of a run still going on (a soak's checkpoint)

    @property
    def as_planned(self) -> bool:
        """The load ended as the profile planned it, not cut short by a failure or the user."""
        return self in (StopReason.DONE, StopReason.DURATION, StopReason.SATURATED)


class NoteSource(StrEnum):
    """Who wrote a note. Rules read facts by source (DEATH, ENGINE), never by a note's words."""

    RUN = "run"
    DEATH = "death"  # the runner judged the engine dead (judge/death.py); the text says how
    ENGINE = "engine"  # a managed engine's process exited
    CHAOS = "chaos"
    SATURATION = "saturation"
    WORKERS = "workers"
    ENGINE_LOG = "engine log"
    CONTROL = "control"
    HEALTH = "health"
    METRICS = "metrics"
    CANARY = "canary"


@dataclass(frozen=True, slots=True)
class Note:
    """Something a watcher or the runner wants the report to say once (an endpoint missing, a stop reason)."""

    t_ns: int
    source: NoteSource | str  # str: a note read back from an older samples file
    text: str


@dataclass(frozen=True, slots=True)
class Fault:
    """A [[chaos.events]] fault as it happened: what loadrepro did, and when the engine answered /health again."""

    action: ChaosAction
    at_ns: int  # when it was caused
    done_ns: int  # when loadrepro's part ended: the engine started again, SIGCONT sent; at_ns for the others
    back_ns: int | None  # /health 200 again after it (None: not within recover_within_s of done_ns)
    recover_within_s: float
    detail: str  # what was done and what the engine did, in words
    clean: bool = True  # oversize: the request was refused cleanly (or served); False: it failed otherwise

    @property
    def over_ns(self) -> int:
        """When it was over: /health 200 again, or when the engine's time to be back ran out."""
        return self.back_ns or self.done_ns + int(self.recover_within_s * 1e9)


@dataclass(frozen=True, slots=True)
class FaultNotCaused:
    """A [[chaos.events]] fault the run never caused, and why (the load ended first; the engine was still down)."""

    action: ChaosAction
    at_s: float  # when it was due, seconds into the load
    why: str


@dataclass(slots=True)
class FaultSpan:
    """One fault on purpose, from when it was caused until it was over (`Fault.over_ns`); None while it goes on."""

    action: ChaosAction
    began_ns: int
    over_ns: int | None = None

    @property
    def outage(self) -> bool:
        """Whether requests may fail during it through no fault of the engine's (it was stopped or restarted)."""
        return self.action in OUTAGES


@dataclass(slots=True)
class FaultSpans:
    """The one answer to "was this the fault's doing": the faults on purpose of a run, each from when it was caused
    until it was over (one still going on reaches every later moment). The runner keeps them as the faults happen
    (a request failing meanwhile is `faulted`, a slow /health poll not judged); the judges read a finished run's
    (RunResult.fault_spans): the health rules, the windows compared for degradation."""

    spans: list[FaultSpan] = field(default_factory=list)

    @classmethod
    def of(cls, faults: Sequence[Fault]) -> FaultSpans:
        return cls([FaultSpan(f.action, f.at_ns, f.over_ns) for f in faults])

    def overlaps(self, start_ns: int, end_ns: int, outages_only: bool = True) -> bool:
        """Whether [start_ns, end_ns] meets a fault that stopped the engine (`outages_only`), or any fault."""
        return any(s.began_ns <= end_ns and (s.over_ns is None or start_ns <= s.over_ns)
                   for s in self.spans if s.outage or not outages_only)

    def going_on(self) -> list[FaultSpan]:
        """The outages not over yet: the engine is down from them."""
        return [s for s in self.spans if s.outage and s.over_ns is None]


Sample = HealthSample | MetricsSample | LogMatch | Note | CanarySample
_SAMPLE_KINDS: dict[str, type] = {"health": HealthSample, "metrics": MetricsSample, "log": LogMatch, "note": Note,
                                  "canary": CanarySample}
_KIND_OF = {v: k for k, v in _SAMPLE_KINDS.items()}


def sample_from_json(data: dict[str, Any]) -> Sample:
    kind = _SAMPLE_KINDS[data["kind"]]
    sample: Sample = kind(**{k: v for k, v in data.items() if k != "kind"})
    return sample


REUSE_SCALE = 10_000  # the share of a prefix found cached is counted in 1/10,000ths (Tally.reuse)
SKETCH_ACCURACY = 0.01  # relative accuracy of the latency sketches: a reported p95 is within 1% of the true one
_MAPPING = LogarithmicMapping(SKETCH_ACCURACY)  # DDSketch's own default mapping: the buckets its sketches use
_LOG_GAMMA = float(np.log(_MAPPING.gamma))


def _sketch() -> DDSketch:
    return DDSketch(SKETCH_ACCURACY)


def add_all(sketch: DDSketch, values: np.ndarray) -> None:
    """Adds every value. A few are added one by one; more, one `add` per bucket they fall in, with their count, of
    the value DDSketch reads that bucket back as: the sketch answers as if each had been added (up to a value on a
    bucket's very edge), at a fraction of the cost for a long stream, whose gaps fall in a few dozen buckets."""
    if len(values) <= _ONE_BY_ONE:
        for value in values.tolist():
            sketch.add(max(value, 1e-6))
        return
    keys = np.ceil(np.log(np.maximum(values, 1e-6)) / _LOG_GAMMA).astype(np.int64)
    low = int(keys.min())
    counts = np.bincount(keys - low)
    for offset in np.flatnonzero(counts).tolist():
        sketch.add(_MAPPING.value(low + offset), int(counts[offset]))


_ONE_BY_ONE = 24  # below this many values, adding each is cheaper than bucketing them with numpy (measured)


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
    itl_ms: DDSketch = dataclasses.field(default_factory=_sketch)
    kv_usage_max: float | None = None
    kv_usage_quiet: float | None = None  # the lowest KV usage while nothing ran or waited
    waiting_max: float | None = None
    preemptions_low: float | None = None  # the engine's preemption counter, lowest and highest seen
    preemptions_high: float | None = None

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
class Tally:
    """Exact counts and mergeable latency sketches (DDSketch, a kept library) over every record of a run, whether
    or not the record is kept in memory: a soak keeps only its first records and its failures, so its memory is
    bounded by the run's shape, not its length. Every latency a report shows comes from here, records kept or
    not: one path, within SKETCH_ACCURACY of the exact value (the lower of the two nearest ranks).
    requests.jsonl has every record."""

    window_s: float
    start_ns: int = 0
    requests: int = 0
    conversations: int = 0  # conversations started: requests of a first turn
    dropped: int = 0  # records not kept in memory
    thinned: int = 0  # watcher samples not kept in memory (drive/recorder.py)
    by_outcome: dict[str, int] = dataclasses.field(default_factory=dict)
    retries: int = 0
    reconnects: int = 0
    prompt_tokens: int = 0
    cached_tokens: int | None = None
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
    # cached tokens its usage reported (None: none reported) -- report.json workload.prefix_reuse.
    reuse_possible: int = 0
    reuse_cached: int | None = None
    prompt_errors: PromptErrors = dataclasses.field(default_factory=PromptErrors)
    recent_ends: RecentEnds = dataclasses.field(default_factory=RecentEnds)
    per_second: PerSecond = dataclasses.field(default_factory=PerSecond)
    health_ms: DDSketch = dataclasses.field(default_factory=_sketch)  # every /health poll's latency
    last_end_ns: int = 0  # when the latest request ended, whatever its outcome
    canaries: int = 0
    canary_outcomes: dict[str, int] = dataclasses.field(default_factory=dict)
    canary_ttft_ms: DDSketch = dataclasses.field(default_factory=_sketch)

    @classmethod
    def of(cls, records: Iterable[RequestRecord], start_ns: int, window_s: float,
           samples: Iterable[Sample] = ()) -> Tally:
        """The tally of records and samples at hand (a result built from all of them)."""
        tally = cls(window_s, start_ns)
        for r in records:
            tally.add(r)
        for sample in samples:
            tally.sampled(sample)
        return tally

    def sampled(self, sample: Sample) -> None:
        """A watcher's sample: a scrape of the engine's metrics into its window (none before the load's time
        zero), a /health poll's latency, a canary's outcome and time to its token."""
        match sample:
            case MetricsSample() if sample.t_ns >= self.start_ns:
                self.windows.setdefault(self.window_of(sample.t_ns), WindowTally()).scraped(sample.values)
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

    def window_of(self, t_ns: int) -> int:
        """The 0-based window a time falls in."""
        return int((t_ns - self.start_ns) / 1e9 // self.window_s)

    def add(self, r: RequestRecord) -> None:
        self.requests += 1
        self.last_end_ns = max(self.last_end_ns, r.end_ns)
        self.conversations += r.turn == 1
        self.by_outcome[r.outcome.value] = self.by_outcome.get(r.outcome.value, 0) + 1
        self.retries, self.reconnects = self.retries + r.retries, self.reconnects + r.reconnects
        self.prompt_tokens += r.prompt_tokens or 0
        if r.cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + r.cached_tokens
        self.output_tokens += r.completion_tokens if r.completion_tokens is not None else len(r.chunk_ns)
        if r.outcome is Outcome.OK:
            self.reuse_possible += r.shared_prefix_tokens
            if r.cached_tokens is not None:
                self.reuse_cached = (self.reuse_cached or 0) + r.cached_tokens
        if r.outcome is Outcome.OK and r.shared_prefix_tokens > 0 and r.turn > 1:
            self._reused(r)
        if r.prompt_tokens is not None and r.expected_prompt_tokens > 0:
            self.prompt_errors.add(r.id, r.conversation, r.turn, r.expected_prompt_tokens, r.prompt_tokens)
        if r.outcome is not Outcome.CANCELLED:
            self.recent_ends.add(r.end_ns, r.outcome in FAILED)
        self.per_second.add(None if r.sent_ns is None else (r.sent_ns - self.start_ns) / 1e9,
                            (r.end_ns - self.start_ns) / 1e9)
        window = self.windows.setdefault(self.window_of(r.sent_or_queued_ns), WindowTally())
        window.requests += 1
        self.windows.setdefault(self.window_of(r.queued_ns), WindowTally()).due += 1
        ending = self.windows.setdefault(self.window_of(r.end_ns), WindowTally())
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
        if len(r.chunk_ns) > 1:
            add_all(window.itl_ms, r.itl_ms())


    def _reused(self, r: RequestRecord) -> None:
        cached = r.cached_tokens or 0
        share = cached * REUSE_SCALE // r.shared_prefix_tokens
        count, first_id, first_cached, first_shared = self.reuse.get(share, (0, r.id, cached, r.shared_prefix_tokens))
        if r.id < first_id:
            first_id, first_cached, first_shared = r.id, cached, r.shared_prefix_tokens
        self.reuse[share] = (count + 1, first_id, first_cached, first_shared)
        self.reuse_reported += r.cached_tokens is not None


def _merged(sketches: Iterable[DDSketch]) -> DDSketch:
    merged = _sketch()
    for sketch in sketches:
        merged.merge(sketch)
    return merged


@dataclass(frozen=True, slots=True)
class RunResult:
    label: str
    base_url: str
    model: str
    engine_cmd: str | None
    seed: int
    started_at: str  # ISO 8601, UTC
    start_ns: int
    end_ns: int
    records: tuple[RequestRecord, ...]
    health: tuple[HealthSample, ...]
    post_health: HealthSample | None
    metrics: tuple[MetricsSample, ...]
    log_matches: tuple[LogMatch, ...]
    log_context: tuple[str, ...]  # the lines before the first fatal log match
    notes: tuple[Note, ...]
    stop_reason: StopReason
    interrupted: bool
    limits: EngineLimits | None = None  # the target's KV limits, when known
    predictions: tuple[Prediction, ...] = ()  # per planned request: fits, must wait, or can never fit
    tally: Tally | None = None  # totals over every record (None: every record is in `records`); see totals()
    workers: int = 1  # processes that sent the load (drive/backend/processes.py)
    backend: BackendName = "in-process"
    watch: WatchSpec = WatchSpec()  # how the target was watched: the health and liveness thresholds rules judge by
    canaries: tuple[CanarySample, ...] = ()
    answers: tuple[AnswerCheck, ...] = ()  # [verify]: each checked answer's judgement
    stopped_ns: int | None = None  # when the runner stopped starting requests (a stop, not the plan's end)
    verify: VerifySpec = VerifySpec()  # how answers were checked
    faults: tuple[Fault, ...] = ()  # [[chaos.events]] as they happened
    progress_ns: int = 0  # the last moment the engine was seen making progress (a token, a canary's, metrics moving)
    worker_crash: str | None = None  # a load worker of loadrepro's failed (StopReason.WORKER_CRASHED): how
    health_owner: str | None = None  # the health path is not the engine's (a gateway's): whose, in words
    not_caused: tuple[FaultNotCaused, ...] = ()  # [[chaos.events]] never caused, and why
    # [verify] on a run that dropped records ([load] keep_records): a uniform sample of the whole run's completed
    # requests with answers, which answers are chosen among (`records` keeps only the first ones)
    sampled_answers: tuple[RequestRecord, ...] = ()

    def noted(self, source: NoteSource) -> Note | None:
        """The first note of `source`, if any."""
        return next((n for n in self.notes if n.source == source), None)

    @property
    def left_service(self) -> bool:
        """The engine died while the run went on (judged) or its process exited: one answer for every rule."""
        return self.noted(NoteSource.DEATH) is not None or self.noted(NoteSource.ENGINE) is not None

    @property
    def fault_spans(self) -> FaultSpans:
        """Its faults on purpose as spans: what was the fault's doing."""
        return FaultSpans.of(self.faults)

    def seconds(self, t_ns: int) -> float:
        """A perf_counter_ns time as seconds since the run started."""
        return (t_ns - self.start_ns) / 1e9

    def totals(self, window_s: float) -> Tally:
        """Counts and sketches over every request of the run, in windows of window_s: the run's own tally, or
        one made from its records when it has none (or has all its records and samples and other windows). A
        tally whose records or samples were not all kept stays in its own windows."""
        if self.tally is not None and (self.tally.window_s == window_s or self.tally.dropped or self.tally.thinned):
            return self.tally
        return Tally.of(self.records, self.start_ns, window_s, (*self.metrics, *self.health, *self.canaries))


class JsonlWriter:
    """Writes a fresh file, one JSON object per line, in a thread of its own: serialising and writing a record
    (a 32,768-token stream's is 0.6 MB of JSON) on the event loop would delay every other stream's chunk times.
    Each line is flushed as it is written, so a crash loses at most what was still queued; `close` waits for
    the queue."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] = path.open("wb")
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._drain, name=f"writer {path.name}", daemon=True)
        self._thread.start()

    def write(self, item: Any) -> None:
        """A dict, or a record or sample dataclass (written with its `kind`)."""
        self._queue.put(item)

    def _drain(self) -> None:
        while (item := self._queue.get()) is not _CLOSE:
            self._file.write(_line(item))
            self._file.flush()

    def close(self) -> None:
        self._queue.put(_CLOSE)
        self._thread.join()
        self._file.close()


_CLOSE = object()


_SLICE = 4096  # chunk times serialised at once: about 0.2 ms of orjson holding the GIL


def _line(item: Any) -> bytes:
    """One JSON line; dataclasses go straight to orjson, which reads their slots without copying them."""
    if isinstance(item, dict):
        return orjson.dumps(item) + b"\n"
    if not isinstance(item, RequestRecord):
        return b'{"kind":"' + _KIND_OF[type(item)].encode() + b'",' + orjson.dumps(item)[1:] + b"\n"
    if len(item.chunk_ns) <= _SLICE:
        return b'{"kind":"request",' + orjson.dumps(item)[1:] + b"\n"
    # orjson holds the GIL for a whole call (1.5 ms for 32,768 chunk times), and the event loop waits that long
    # for it: serialise the chunk times in slices, letting the loop run between them.
    parts = []
    for start in range(0, len(item.chunk_ns), _SLICE):
        parts.append(orjson.dumps(item.chunk_ns[start:start + _SLICE])[1:-1])
        time.sleep(0)
    rest = orjson.dumps(dataclasses.replace(item, chunk_ns=()))
    head, tail = rest.split(b'"chunk_ns":[]', 1)
    return b'{"kind":"request",' + head[1:] + b'"chunk_ns":[' + b",".join(parts) + b"]" + tail + b"\n"


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The complete lines of a JSONL file; a last line cut short by a crash is skipped."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
