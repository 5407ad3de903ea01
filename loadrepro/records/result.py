"""A finished run (or one going on, for checkpoints): its records, samples and typed facts."""

from __future__ import annotations

from dataclasses import dataclass

from loadrepro.config.capacity import EngineLimits, Prediction
from loadrepro.config.profile import BackendName, SloSpec, WatchSpec
from loadrepro.records.memory import MemorySample
from loadrepro.records.tally import Tally
from loadrepro.records.vocabulary import (
    CanarySample,
    Fault,
    FaultNotCaused,
    FaultSpans,
    HealthSample,
    LogMatch,
    MetricsSample,
    Note,
    NoteSource,
    RequestRecord,
    StopReason,
    Watched,
)


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
    log_context: tuple[str, ...]  # the lines before the first fatal log match (the target's log first)
    notes: tuple[Note, ...]
    stop_reason: StopReason
    interrupted: bool
    limits: EngineLimits | None = None  # the target's KV limits, when known
    predictions: tuple[Prediction, ...] = ()  # per planned request: fits, must wait, or can never fit
    tally: Tally | None = None  # totals over every record (None: every record is in `records`); see totals()
    workers: int = 1  # processes that sent the load (load/backend/processes.py)
    backend: BackendName = "in-process"
    watch: WatchSpec = WatchSpec()  # how the target was watched: the health and liveness thresholds rules judge by
    canaries: tuple[CanarySample, ...] = ()
    stopped_ns: int | None = None  # when the runner stopped starting requests (a stop, not the plan's end)
    faults: tuple[Fault, ...] = ()  # [[chaos.events]] as they happened
    progress_ns: int = 0  # the last moment the engine was seen making progress (a token, a canary's, metrics moving)
    worker_crash: str | None = None  # a load worker of loadrepro's failed (StopReason.WORKER_CRASHED): how
    health_owner: str | None = None  # the health path is not the engine's (a gateway's): whose, in words
    slo: SloSpec = SloSpec()  # the service level its requests were judged against ([slo])
    watched: tuple[Watched, ...] = ()  # the other processes of the deployment watched ([[watch.endpoints]])
    replicas: tuple[Watched, ...] = ()  # the replicas beside the target, watched ([target] replicas), in order
    not_caused: tuple[FaultNotCaused, ...] = ()  # [[chaos.events]] never caused, and why
    memory: tuple[MemorySample, ...] = ()  # the memory of the engine loadrepro started, read beside the polls
    introspection: tuple[HealthSample, ...] = ()  # the polls of [watch] introspection_path (llama.cpp's /slots)
    # [verify] on a run that dropped records ([load] keep_records): a uniform sample of the whole run's completed
    # requests with answers, which answers are chosen among (`records` keeps only the first ones)
    sampled_answers: tuple[RequestRecord, ...] = ()
    # An engine loadrepro started: whether its process still ran when the run ended (None: it started none). A
    # running process whose /health gets no answer is an unresponsive frontend, not a dead engine.
    engine_running: bool | None = None
    # The longest sequence one request may have (max_model_len, a llama.cpp slot's n_ctx) and where it was read; None
    # when the target publishes none: an answered prompt planned longer than it was cut by the engine.
    context: tuple[int, str] | None = None
    # An engine loadrepro started that nothing warmed before the load: when it became ready (its first /health 200);
    # None when that is not known or a warm-up answered first. Stalls that all began soon after it may be a cold start.
    fresh_engine_ns: int | None = None

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
        return Tally.of(self.records, self.start_ns, window_s,
                        (*self.metrics, *self.health, *self.canaries, *self.memory), self.slo, self.predictions)
