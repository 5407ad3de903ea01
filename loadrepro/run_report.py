"""RunReport: the versioned schema of report.json (contract fields, plus additions), written by report/ and read
by compare and by whoever acts on a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = "loadrepro.report/1"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Percentiles(_Model):
    p50: float | None = Field(None, description="The median.")
    p95: float | None = Field(None, description="The 95th percentile.")
    p99: float | None = Field(None, description="The 99th percentile.")
    max: float | None = Field(None, description="The largest value.")
    count: int | None = Field(None, description="How many values these are drawn from (what they are: the row's "
                                                "description says).")


class Latency(_Model):
    """Latency over every request of the run, kept in memory or not: from DDSketch sketches, each value within 1%
    of the exact one (the lower of the two nearest ranks). Each row covers its own requests (`count`)."""

    ttft_ms: Percentiles = Field(description="Sent -> first token of any kind (reasoning, tool-call arguments, "
                                             "content), over the requests that received a token.")
    itl_ms: Percentiles = Field(description="The gaps between consecutive chunks that carried tokens, over every "
                                            "such gap of every request.")
    e2e_ms: Percentiles = Field(description="Sent -> end, over every request that was sent, whatever its outcome: "
                                            "failed ones included, so it can sit below TTFT.")
    queue_ms: Percentiles = Field(description="Queued -> sent: waiting for a concurrency slot inside loadrepro, over "
                                              "every request that was sent.")
    ttfc_ms: Percentiles = Field(Percentiles(), description="Sent -> first content token (later than TTFT when "
                                                            "reasoning or a tool call comes first), over the requests "
                                                            "that received content.")


class Throughput(_Model):
    requests_per_s: float
    output_tokens_per_s: float


class Cache(_Model):
    prompt_tokens: int
    cached_tokens: int | None  # None: the target reported none


class TokenSpread(_Model):
    p50: int
    p95: int
    max: int


class WorkloadInfo(_Model):
    kind: str
    conversations: int
    requests: int
    prompt_tokens: TokenSpread
    seed: int
    faker_version: str
    calibration_source: str


class Target(_Model):
    base_url: str
    model: str
    engine_cmd: str | None = None


class Requests(_Model):
    total: int
    by_outcome: dict[str, int]
    reconnects: int = 0  # requests resent at once because a pooled connection was closed: not outcomes
    conversations: int = Field(0, description="Conversations that ran (their first turns were sent): a soak "
                               "repeats the planned ones.")


class WorkersInfo(_Model):
    """What sent the load: this process, or worker processes on this machine (`--workers N`)."""

    count: int
    backend: str  # in-process | processes | ray


class CalibrationInfo(_Model):
    """How the workload's lengths were counted."""

    source: str
    probe_requests: int  # requests sent to the engine to count tokens (no tokenize endpoint)
    probe_tokens: int


class WorstLength(_Model):
    request: int
    conversation: int
    turn: int
    planned: int
    measured: int


class Lengths(_Model):
    """Planned prompt lengths against the target's usage.prompt_tokens; errors are shares of the planned length."""

    requests: int  # requests whose usage reported prompt tokens
    error_p50: float | None
    error_p95: float | None
    error_max: float | None
    bias: float | None  # mean signed error: + the target counted more than planned
    worst: WorstLength | None


class Transition(_Model):
    t_s: float
    status: int | str


class Health(_Model):
    pre: int | str | None
    post: int | str | None
    transitions: list[Transition]
    path: str = Field("/health", description="The health path that was polled ([watch] health_path).")
    latency_ms: Percentiles = Field(Percentiles(), description="How long the polls took to answer (an unanswered "
                                    "poll counts at the time it was given up).")
    slow: int = Field(0, description="Polls slower than [watch] health_timeout_s.")


class CanaryInfo(_Model):
    """The canaries of a run ([watch] canary_interval_s): salted one-token requests outside the workload."""

    sent: int = Field(description="Canaries sent.")
    ok: int = Field(description="Canaries that got their token and finished.")
    ttft_ms: Percentiles = Field(description="Sent to their token, over those that got one.")
    by_outcome: dict[str, int] = Field(description="Canaries by outcome.")


class Timing(_Model):
    """What a run costs beside its load, in seconds."""

    to_first_request_s: float | None = Field(description="From the command's start (the process's) to the load's "
                                             "first request: starting the engine, planning, counting lengths.")
    last_answer_to_verdict_s: float | None = Field(description="From the last answer to the verdict: the grace for "
                                                   "requests in flight, the post-run health poll, judging.")


class Liveness(_Model):
    """What a liveness probe with the deployment's settings ([watch] liveness_*) would have done to the engine."""

    timeout_s: float = Field(description="The probe's timeout.")
    period_s: float = Field(description="How often it probes.")
    failures: int = Field(description="Failed probes in a row that restart the engine.")
    would_restart_at_s: float | None = Field(description="When it would have restarted the engine; null: never.")


class FirstFailure(_Model):
    t_s: float
    request: int
    outcome: str
    detail: str
    conversation: int
    turn: int
    status: int | None


class SignatureCount(_Model):
    name: str
    class_: str = Field(alias="class")
    count: int
    first_t_s: float
    sample: str


class RuleResult(_Model):
    name: str
    fired: bool
    severity: str | None
    detail: str


class Pressure(_Model):
    kv_usage_peak: float | None
    waiting_peak: float | None
    preemptions: float | None
    pool_usage_peak: dict[str, float] = {}  # per KV pool the engine reports blocks for (the simulated engine)


class LogPlace(_Model):
    process: str
    signature: str
    file: str
    line: int
    timestamp: str | None
    text: str


class DiagnosisInfo(_Model):
    """The engine-log analysis of a run whose engine log loadrepro kept."""

    fatal: bool
    pressure_only: bool
    initiating: LogPlace | None
    collateral: list[LogPlace]
    figures: dict[str, float]
    capacity: str
    next_step: str
    verification: str


class Environment(_Model):
    loadrepro_version: str
    python: str
    platform: str


class RequestRow(_Model):
    id: int
    conversation: int
    turn: int
    outcome: str
    status: int | None
    ttft_ms: float | None
    e2e_ms: float | None
    output_tokens: int | None
    cached_tokens: int | None
    shared_prefix_tokens: int
    prediction: str | None = None  # fits | must_wait | never_fits
    limit: str = ""
    ttfc_ms: float | None = None  # sent -> first content token


class CapacityInfo(_Model):
    source: str
    tokens_per_block: int
    pool_tokens: int
    draft_pool_tokens: int | None
    index_entries: int | None
    max_seq_len: int
    beam_width: int
    outcomes_by_prediction: dict[str, dict[str, int]]


class WindowRow(_Model):
    """One window of a long run ([verdict] window_s), by the time its requests were sent."""

    index: int
    start_s: float
    end_s: float
    requests: int
    outcomes: dict[str, int]
    failed: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    kv_usage_max: float | None
    kv_usage_quiet: float | None
    waiting_max: float | None
    preemptions: float | None


class RunReport(_Model):
    schema_: str = Field(SCHEMA, alias="schema", description="The schema's name and version: loadrepro.report/1.")
    verdict: str = Field(description="pass or fail; running in a checkpoint written while the run goes on.")
    finished: bool = Field(True, description="False in a checkpoint: what the run had done so far.")
    reasons: list[str] = Field(description="Why the verdict is what it is: each failing rule's words.")
    label: str = Field(description="The run's name (the sim policy, run, or --label).")
    profile: dict[str, Any] = Field(description="The resolved profile the run used, every key.")
    seed: int = Field(description="The workload's seed.")
    target: Target = Field(description="What was loaded: its URL, model and the command that started it.")
    started_at: str = Field(description="When the run started (ISO 8601, UTC).")
    duration_s: float = Field(description="From the load's start to its end, seconds.")
    command: str = Field(description="The command that reproduces this run.")
    stop_reason: str = Field(description="done, duration, engine_death, interrupted or worker_crashed.")
    interrupted: bool = Field(description="Ctrl-C or SIGTERM ended the run before its workload finished.")
    requests: Requests = Field(description="Requests by outcome, reconnects and conversations, over every request.")
    health: Health = Field(description="The /health polls: their transitions and latency.")
    first_failure: FirstFailure | None = Field(description="The first request that failed.")
    signatures: list[SignatureCount] = Field(description="Engine error texts found in responses and the engine's log.")
    rules: list[RuleResult] = Field(description="Every rule, in the order judged, fired or not.")
    latency: Latency = Field(description="Latency percentiles over every request.")
    throughput: Throughput = Field(description="Completed requests and output tokens per second.")
    cache: Cache = Field(description="Prompt tokens sent and those the target reported cached.")
    workload: WorkloadInfo = Field(description="What was planned: conversations, requests, prompt lengths, seed.")
    pressure: Pressure = Field(description="What the engine's metrics said of KV usage, waiting and preemptions.")
    capacity: CapacityInfo | None = Field(
        None, description="The KV arithmetic of the target, when its limits are known.")
    diagnosis: DiagnosisInfo | None = Field(
        None, description="What the engine's log says: first fatal signature, initiating rank, next step.")
    calibration: CalibrationInfo | None = Field(None, description="How lengths were counted in the target's tokens.")
    lengths: Lengths | None = Field(None, description="Planned prompt lengths against the target's own counts.")
    workers: WorkersInfo | None = Field(None, description="How many processes or Ray actors sent the load.")
    liveness: Liveness | None = Field(
        None, description="When a Kubernetes-style liveness probe would have restarted the engine.")
    canary: CanaryInfo | None = Field(
        None, description="The canary requests sent outside the workload, and their outcomes.")
    timing: Timing | None = Field(
        None, description=("What the run cost beside its load: to the first request, from the last answer to "
                           "the verdict."))
    log_excerpt: list[str] = Field(description="The engine log's lines before its first fatal line.")
    notes: list[str] = Field(description="What the watchers, the runner and loadrepro want said once.")
    environment: Environment = Field(description="loadrepro's version, Python and the platform.")
    windows: list[WindowRow] = Field(
        [], description="A long run's windows ([verdict] window_s), by the time their requests were sent.")
    request_table: list[RequestRow] = Field(
        description="One row per request (at most 4,000: the failed first, then the first and the last).")
    request_table_total: int | None = Field(
        None, description=("Set when the table keeps only some rows: the requests in all (requests.jsonl has "
                           "every one)."))
    run_dir: str | None = Field(
        None, description="Where the run's files are (set by the Python API; not written to report.json).")

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def findings(self) -> list[RuleResult]:
        """The rules that fired, failures and notes alike, in the order the rules run."""
        return [r for r in self.rules if r.fired]

    def __repr__(self) -> str:
        """What a failing `assert report.passed` should show: the verdict, its reasons, where the report is."""
        where = f", report {Path(self.run_dir) / 'report.md'}" if self.run_dir else ""
        reasons = "; ".join(self.reasons) or "no rule fired"
        return f"<RunReport {self.label}: {self.verdict.upper()} ({reasons}){where}>"

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude={"run_dir"})
