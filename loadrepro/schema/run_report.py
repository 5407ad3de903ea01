"""RunReport: the versioned schema of report.json (contract fields, plus additions), written by report/ and read
by compare and by whoever acts on a run. Its sections are schema/report_sections.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from loadrepro.schema.long_run_sections import (
    ChaosRow,
    EndpointInfo,
    Liveness,
    SloInfo,
    TrialsInfo,
    WatchedEndpointInfo,
    WindowRow,
)
from loadrepro.schema.report_kinds import NOTHING_FIT, Model, Severity, VerdictStatus
from loadrepro.schema.report_sections import (
    AgentsInfo,
    Cache,
    CalibrationInfo,
    CanaryInfo,
    CapacityInfo,
    DiagnosisInfo,
    EngineMemoryInfo,
    Environment,
    FirstFailure,
    Health,
    Latency,
    Lengths,
    OutputsInfo,
    Pressure,
    RequestRow,
    Requests,
    RuleResult,
    SignatureCount,
    SpeculativeInfo,
    StructuredInfo,
    Target,
    Throughput,
    Timing,
    WorkersInfo,
    WorkloadInfo,
)

SCHEMA = "loadrepro.report/1"


_NOT_DUMPED = {"run_dir"}  # where this copy was read from: not part of the report


class RunReport(Model):
    schema_: str = Field(SCHEMA, alias="schema", description="The schema's name and version: loadrepro.report/1.")
    verdict: VerdictStatus = Field(description="pass or fail; running in a checkpoint written while the run goes "
                                   "on.")
    finished: bool = Field(True, description="False in a checkpoint: what the run had done so far.")
    reasons: list[str] = Field(description="Why the verdict is what it is: each failing rule's words.")
    label: str = Field(description="The run's name (the sim policy, run, or --label).")
    profile: dict[str, Any] = Field(description="The resolved profile the run used, every key.")
    seed: int = Field(description="The workload's seed.")
    target: Target = Field(description="What was loaded: its URL, model and the command that started it.")
    started_at: str = Field(description="When the run started (ISO 8601, UTC).")
    duration_s: float = Field(description="From the load's start to its end, seconds.")
    command: str = Field(description="The command that reproduces this run.")
    stop_reason: str = Field(description="done, duration, saturated, engine_death, interrupted, worker_crashed, "
                             "running (a checkpoint's) or killed (rebuilt by `loadrepro report` from the files of a "
                             "run whose process ended before its report: incomplete).")
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
    outputs: OutputsInfo | None = Field(
        None, description="[verify]: answers under load checked against the same requests sent alone.")
    chaos: list[ChaosRow] = Field(
        [], description="[[chaos.events]]: each fault caused on purpose, and the engine's recovery from it.")
    trials: TrialsInfo | None = Field(
        None, description="--trials: the same workload run N times, each on a fresh engine; the verdict fails when "
        "any trial failed, and the failure rate says how flaky.")
    timing: Timing | None = Field(
        None, description=("What the run cost beside its load: to the first request, from the last answer to "
                           "the verdict."))
    log_excerpt: list[str] = Field(description="The engine log's lines before its first fatal line.")
    notes: list[str] = Field(description="What the watchers, the runner and loadrepro want said once.")
    environment: Environment = Field(description="loadrepro's version, Python and the platform.")
    windows: list[WindowRow] = Field(
        [], description="A long run's windows ([verdict] window_s), by the time their requests were sent.")
    slo: SloInfo | None = Field(None, description="The requests against the service level ([slo]; null: no limit "
                                "set).")
    speculative: SpeculativeInfo | None = Field(
        None, description="Speculative decoding's drafts and acceptance, per request and early against late (null: "
        "the engine reported no drafts).")
    engine_memory: EngineMemoryInfo | None = Field(
        None, description="The engine's memory: at start, peak, at the end idle, growth per 1,000 requests after the "
        "warm-up, swap (null: not read: a target at a URL whose /metrics publish no process_resident_memory_bytes).")
    agents: AgentsInfo | None = Field(
        None, description="Agent trees as they ran: completed, makespan, fan-out, waits for subagents (null: no agent "
        "spawned any).")
    structured_outputs: StructuredInfo | None = Field(
        None, description="Structured answers and whether they parsed (null: the workload asked for none).")
    watched_endpoints: list[WatchedEndpointInfo] = Field(
        [], description="The other processes of the deployment watched ([[watch.endpoints]]).")
    endpoints: list[EndpointInfo] = Field(
        [], description="The target's replicas, the target first ([target] replicas; empty: one engine).")
    request_table: list[RequestRow] = Field(
        description="One row per request (at most 4,000: the failed first, then the first and the last).")
    request_table_total: int | None = Field(
        None, description=("Set when the table keeps only some rows: the requests in all (requests.jsonl has "
                           "every one)."))
    run_dir: str | None = Field(
        None, description="Where the run's files are (set by the Python API; not written to report.json).")

    @property
    def passed(self) -> bool:
        return self.verdict == VerdictStatus.PASS

    @property
    def tested_nothing(self) -> bool:
        """It failed on rule nothing_fit alone: the profile does not fit its target (a usage outcome, exit 2), which
        is not the engine's failure."""
        return {r.name for r in self.rules if r.fired and r.severity is Severity.FAIL} == {NOTHING_FIT}

    @property
    def exit_code(self) -> int:
        """What a command that made or rebuilt this report exits with (`run`, `report`): 0 when it passed, 2 when it
        tested nothing, 1 when it failed."""
        return 0 if self.passed else 2 if self.tested_nothing else 1

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
        return self.model_dump(mode="json", by_alias=True, exclude=_NOT_DUMPED)

    def dump_json(self) -> str:
        """report.json's text: pydantic's own serialiser, ten times as quick as json.dumps of `dump` (2 ms against
        17 for a 2,000-request report) and the same text."""
        return self.model_dump_json(indent=2, by_alias=True, exclude=_NOT_DUMPED) + "\n"
