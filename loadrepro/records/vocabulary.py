"""What a run observes, as types: each request's record and outcome, the watchers' samples, notes, stop
reasons, faults on purpose, a started replica's exit and how the run ended, and the names of the engine's canonical
metric series."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from loadrepro.config.profile import OUTAGES, ChaosAction, VerifySpec
from loadrepro.records.memory import MemorySample


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


# What an answer under load can be, against the same request alone (judge/answers.py says which is which).
ANSWER_KINDS = ("identical", "near_tie", "diverged", "garbled", "cross_talk", "unverifiable")
WRONG = frozenset({"diverged", "garbled", "cross_talk"})  # the kinds a rule fails a run on


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

    def wrong(self, spec: VerifySpec) -> bool:
        """Different from the reference where the reference was sure of its token: diverged, or a cross-talk or
        garbled answer that also differed so."""
        return self.kind == "diverged" or (self.kind in WRONG and self.margin is not None and
                                           self.margin >= spec.min_margin)


@dataclass(frozen=True, slots=True)
class Verification:
    """What [verify] found after the load, a stage of its own: each checked answer against the same request sent
    alone on the idle engine, and how they were checked. Empty: none checked."""

    checks: tuple[AnswerCheck, ...] = ()
    spec: VerifySpec = field(default_factory=VerifySpec)


def wrong_answers(answers: Iterable[AnswerCheck]) -> list[AnswerCheck]:
    """The answers a rule fails a run on (their kind in WRONG), in request order: what the report lists and the
    timeline marks, one definition."""
    return sorted((c for c in answers if c.kind in WRONG), key=lambda c: c.request)


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
    structured: str | None = None  # completed or refused, having asked for a structured answer: its format
    unparsed: str | None = None  # that structured answer, when it ended on its own and did not parse (first words)
    replica: int = 0  # the replica it went to: 0 the target, i the ith of [target] replicas
    draft_tokens: int | None = None  # speculative decoding: tokens drafted for it (llama.cpp's timings.draft_n)
    draft_accepted: int | None = None  # of those, accepted (timings.draft_n_accepted)
    own_prefix_tokens: int | None = None  # agent traces: the planned request's, of its shared_prefix_tokens

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

    @property
    def mean_itl_ms(self) -> float | None:
        """Its mean gap between token chunks (None: fewer than two chunks), as [slo] itl_ms and the live metrics
        read it."""
        n = len(self.chunk_ns)
        return (self.chunk_ns[-1] - self.chunk_ns[0]) / (n - 1) / 1e6 if n > 1 else None

    @property
    def sent_or_queued_ns(self) -> int:
        """When it was sent (queued, when never sent): the time that places it in a window."""
        return self.sent_ns if self.sent_ns is not None else self.queued_ns

    def expecting_no_cache(self) -> RequestRecord:
        """This record of a request sent where none of its prefix can be cached (an engine restarted since its turn
        before, another replica than that turn's): nothing of it is expected from the prefix cache, its own
        tree's share included."""
        own = None if self.own_prefix_tokens is None else 0
        return dataclasses.replace(self, shared_prefix_tokens=0, own_prefix_tokens=own)

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


@dataclass(frozen=True, slots=True)
class EndpointSample:
    """A sample of another process of the deployment ([[watch.endpoints]]): its /health or its metrics."""

    endpoint: str  # its name
    sample: HealthSample | MetricsSample

    @property
    def t_ns(self) -> int:
        return self.sample.t_ns


def replica_name(index: int) -> str:
    """A replica's name in reports and metrics: replica-0 is the target, replica-i the ith of [target] replicas."""
    return f"replica-{index}"


@dataclass(frozen=True, slots=True)
class Watched:
    """What loadrepro saw of one watched endpoint over the run."""

    name: str
    health_url: str
    metrics_url: str
    health: tuple[HealthSample, ...] = ()
    metrics: tuple[MetricsSample, ...] = ()
    url: str = ""  # a replica's base URL ([target] replicas)
    exit: ProcessExit | None = None  # a replica loadrepro started (--replicas) that exited by itself during the run


# Canonical metrics series: every engine's families are mapped to these when scraped (load/watch/metrics_scrapes.py).
KV_USAGE, RUNNING, WAITING, PREEMPTIONS = "kv_usage", "running", "waiting", "preemptions"
CACHE_HITS, CACHE_QUERIES = "prefix_cache_hits", "prefix_cache_queries"
SPEC_DRAFTED, SPEC_ACCEPTED = "spec_draft_tokens", "spec_accepted_tokens"  # counters of speculative decoding
ENGINE_RSS = "engine_rss_bytes"  # the serving process's resident memory, where /metrics publish it
ENGINE_FINISHED = "engine_finished_requests"  # requests the engine finished since it started (vLLM's counter)
POOL_USAGE = "pool_usage:"  # + a pool's name: the share of its blocks in use (the simulated engine's pools)


@dataclass(frozen=True, slots=True)
class MetricsSample:
    t_ns: int
    values: dict[str, float]  # canonical series (load/watch/metrics_scrapes.py) -> value: kv_usage, running, ...
    in_flight: int | None = None  # loadrepro's requests in flight when the scrape was sent (None: not known)


@dataclass(frozen=True, slots=True)
class LogMatch:
    t_ns: int
    line_number: int
    signature: str
    klass: str
    line: str
    replica: int = 0  # whose log: 0 the target's, i the ith replica's (one loadrepro started, --replicas)


@dataclass(frozen=True, slots=True)
class ProcessExit:
    """A process loadrepro started that exited by itself during the run."""

    t_ns: int  # when loadrepro saw it gone (within a poll of the exit)
    code: int  # its exit status; negative: the signal that ended it
    how: str  # in words: "killed by SIGKILL", "exited with code 1"


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
    KILLED = "killed"  # its process ended before its report (SIGKILL): the report rebuilt from its files

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
    culprit: str | None = None  # malformed: the first kind it did not survive (no answer, /health turned)
    unrefused: tuple[str, ...] = ()  # malformed: kinds answered otherwise than with a 4xx while it kept serving

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


@dataclass(frozen=True, slots=True)
class RunEnd:
    """What the runner knew once the load and the watching ended (RunResult's fields of the same names); a run
    killed before then has none."""

    end_ns: int
    post_health: HealthSample | None
    progress_ns: int
    stopped_ns: int | None
    engine_running: bool | None
    worker_crash: str | None


@dataclass(frozen=True, slots=True)
class ReplicaExit:
    """A replica loadrepro started ([target] replicas by index, from 1) that exited by itself during the run."""

    index: int
    exit: ProcessExit


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


Sample = HealthSample | MetricsSample | LogMatch | Note | CanarySample | MemorySample
_SAMPLE_KINDS: dict[str, type] = {"health": HealthSample, "metrics": MetricsSample, "log": LogMatch, "note": Note,
                                  "canary": CanarySample, "memory": MemorySample}
KIND_OF = {v: k for k, v in _SAMPLE_KINDS.items()}


def sample_from_json(data: dict[str, Any]) -> Sample:
    kind = _SAMPLE_KINDS[data["kind"]]
    sample: Sample = kind(**{k: v for k, v in data.items() if k != "kind"})
    return sample
