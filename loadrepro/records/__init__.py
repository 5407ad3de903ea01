"""What a run observed: one RequestRecord per request, watcher samples, and the RunResult that holds them
(`vocabulary`: the types; `tally`: counts and sketches over all of them; `result`: the run; `jsonl`: the files).

Times are integers in nanoseconds from `time.perf_counter_ns()` (suffix `_ns`), plus one wall-clock timestamp
per record. Records and samples are appended to JSONL files as they happen, so a crash loses only what was
still in flight.
"""

from __future__ import annotations

from loadrepro.records.jsonl import (
    JsonlWriter,
    RunFiles,
    read_checks,
    read_jsonl,
    read_run_files,
    write_checks,
    write_lines,
)
from loadrepro.records.memory import MemorySample
from loadrepro.records.result import RunResult
from loadrepro.records.tally import REUSE_SCALE, SKETCH_ACCURACY, Tally, WindowTally, quiet
from loadrepro.records.vocabulary import (
    ANSWER_CHARS,
    ANSWER_KINDS,
    CACHE_HITS,
    CACHE_QUERIES,
    ENGINE_FINISHED,
    ENGINE_RSS,
    FAILED,
    KV_USAGE,
    POOL_USAGE,
    PREEMPTIONS,
    RUNNING,
    SPEC_ACCEPTED,
    SPEC_DRAFTED,
    WAITING,
    WRONG,
    Answer,
    AnswerCheck,
    CanarySample,
    EndpointSample,
    Fault,
    FaultNotCaused,
    FaultSpan,
    FaultSpans,
    HealthSample,
    LogMatch,
    MetricsSample,
    Note,
    NoteSource,
    Outcome,
    ProcessExit,
    ReplicaExit,
    RequestRecord,
    RunEnd,
    Sample,
    StopReason,
    Verification,
    Watched,
    replica_name,
    sample_from_json,
    wrong_answers,
)

__all__ = [
    "ANSWER_CHARS", "ANSWER_KINDS", "CACHE_HITS", "CACHE_QUERIES", "ENGINE_FINISHED", "ENGINE_RSS", "FAILED",
    "KV_USAGE", "POOL_USAGE", "PREEMPTIONS", "SPEC_ACCEPTED", "SPEC_DRAFTED",
    "REUSE_SCALE", "RUNNING", "SKETCH_ACCURACY", "WAITING", "WRONG", "Answer", "AnswerCheck", "CanarySample",
    "EndpointSample", "Fault", "MemorySample",
    "FaultNotCaused", "FaultSpan", "FaultSpans", "HealthSample", "JsonlWriter", "LogMatch", "MetricsSample", "Note",
    "NoteSource", "Outcome", "ProcessExit", "ReplicaExit",
    "RequestRecord", "RunEnd", "RunResult", "Sample", "StopReason", "Tally",
    "Verification", "Watched",
    "RunFiles", "WindowTally", "quiet", "replica_name", "read_checks", "read_jsonl", "read_run_files",
    "sample_from_json", "write_checks", "write_lines",
    "wrong_answers"]
