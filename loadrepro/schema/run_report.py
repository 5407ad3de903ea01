"""RunReport: the versioned schema of report.json (contract fields, plus additions), written by report/ and read
by compare and by whoever acts on a run."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA = "loadrepro.report/1"


class VerdictStatus(StrEnum):
    """A run's verdict: report.json's `verdict`, a trial's, the judge's."""

    PASS = "pass"
    FAIL = "fail"
    RUNNING = "running"  # a checkpoint written while the run goes on


class Severity(StrEnum):
    """What a rule's finding does to the verdict: fails it, or is said beside it."""

    FAIL = "fail"
    INFO = "info"


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
    requests_per_s: float = Field(description="Completed requests per second of the run.")
    output_tokens_per_s: float = Field(description="Output tokens per second of the run, every request's.")


class Cache(_Model):
    prompt_tokens: int = Field(description="Prompt tokens the target counted, over every request.")
    cached_tokens: int | None = Field(
        description="Of those, the ones it reported cached; null: the target reports none.")


class TokenSpread(_Model):
    p50: int = Field(description="The median.")
    p95: int = Field(description="The 95th percentile.")
    max: int = Field(description="The largest.")


class PrefixReuse(_Model):
    possible_tokens: int = Field(
        description="Prompt tokens of the completed requests that a perfect prefix cache could have served: what "
        "each shares with an earlier request of the workload (a trace: the blocks seen earlier in it).")
    cached_tokens: int | None = Field(
        description="The cached prompt tokens those same requests' usage reported; null: the target reports none.")
    ratio: float | None = Field(
        description="cached_tokens / possible_tokens; null when the target reports none or nothing could be served.")


class WorkloadInfo(_Model):
    kind: str = Field(description="conversations or trace.")
    conversations: int = Field(description="Conversations planned.")
    requests: int = Field(description="Requests planned.")
    prompt_tokens: TokenSpread = Field(description="Planned prompt lengths, in the target's tokens.")
    seed: int = Field(description="The workload's seed.")
    faker_version: str = Field(
        description="The Faker version that wrote the records (the same seed and version, the same text).")
    calibration_source: str = Field(description="How lengths were counted.")
    origin: str = Field("", description="Where the requests came from, in a sentence (a trace: its file, its "
                        "format and how it was chosen, what is replayed and what was left out).")
    prefix_reuse: PrefixReuse | None = Field(
        None, description="The prompt tokens a perfect prefix cache could have served the completed requests, "
        "against what the engine reported cached: whether the replay loaded the cache as the traffic could.")


class Target(_Model):
    base_url: str = Field(description="The target's URL.")
    model: str = Field(description="The model asked for.")
    engine_cmd: str | None = Field(None, description="The command that started the engine, when loadrepro started it.")


class Requests(_Model):
    total: int = Field(description="Requests sent or given up, every one.")
    by_outcome: dict[str, int] = Field(description="Requests by outcome.")
    reconnects: int = Field(
        0, description="Requests resent at once because a pooled connection was closed (not outcomes).")
    conversations: int = Field(0, description="Conversations that ran (their first turns were sent): a soak "
                               "repeats the planned ones.")


class WorkersInfo(_Model):
    """What sent the load: this process, or worker processes on this machine (`--workers N`)."""

    count: int = Field(description="Processes or actors that sent the load.")
    backend: str = Field(description="in-process, processes or ray.")


class CalibrationInfo(_Model):
    """How the workload's lengths were counted."""

    source: str = Field(description="What counted the tokens.")
    probe_requests: int = Field(description="Requests sent to the engine to count tokens (no tokenize endpoint).")
    probe_tokens: int = Field(description="Prompt tokens those requests carried.")


class WorstLength(_Model):
    request: int = Field(description="The request's id.")
    conversation: int = Field(description="Its conversation.")
    turn: int = Field(description="Its turn.")
    planned: int = Field(description="The prompt length planned.")
    measured: int = Field(description="The length the target counted.")


class Lengths(_Model):
    """Planned prompt lengths against the target's usage.prompt_tokens; errors are shares of the planned length."""

    requests: int = Field(description="Requests whose usage reported prompt tokens.")
    error_p50: float | None = Field(description="Median of |error|.")
    error_p95: float | None = Field(description="95th percentile of |error|.")
    error_max: float | None = Field(description="Largest |error|.")
    bias: float | None = Field(description="Mean signed error: + the target counted more than planned.")
    worst: WorstLength | None = Field(description="The request furthest from its plan.")


class Transition(_Model):
    t_s: float = Field(description="Seconds since the load started.")
    status: int | str = Field(description="The /health status from then on.")


class Health(_Model):
    pre: int | str | None = Field(description="/health before the run.")
    post: int | str | None = Field(description="/health right after the run.")
    transitions: list[Transition] = Field(description="Each change of /health status during the run.")
    path: str = Field("/health", description="The health path that was polled ([watch] health_path).")
    latency_ms: Percentiles = Field(Percentiles(), description="How long the polls took to answer (an unanswered "
                                    "poll counts at the time it was given up).")
    slow: int = Field(0, description="Polls slower than [watch] health_timeout_s.")
    owner: str | None = Field(None, description="Whose health the path tells when it is not the engine's: a "
                              "gateway in front of it, with how it was recognised.")


class StructuredInfo(_Model):
    """Structured answers ([workload] structured_share): requests that asked for JSON (response_format), a choice,
    a regex or a grammar (structured_outputs)."""

    format: str = Field(description="What they asked for: the profile's structured formats, comma-separated "
                        "(json_schema, json_object, choice, regex, grammar).")
    answers: int = Field(description="Such requests that completed.")
    cut: int = Field(description="Of those, answers cut at max_tokens (not judged).")
    unchecked: int = Field(0, description="Of those that ended on their own, answers to a grammar: counted, not "
                           "checked (not judged).")
    unparsed: int = Field(description="Of those that ended on their own, answers that were not what they asked for: "
                          "no JSON object, none of the choices, no match of the regex (rule structured_output).")
    first_unparsed_request: int | None = Field(description="The first such request's id.")
    first_unparsed: str | None = Field(description="Its answer's first words.")
    refused: int = Field(0, description="Such requests the engine refused (4xx): not judged, and not counted "
                         "against its capacity (rule capacity_mismatch); an engine not started to serve what they "
                         "ask for (vLLM's tool calls without --tool-call-parser) refuses them all.")
    first_refused_request: int | None = Field(None, description="The first refused request's id.")
    first_refusal: str | None = Field(None, description="The engine's words refusing it (first 200 characters).")


class WatchedEndpointInfo(_Model):
    """Another process of the deployment watched beside the target ([[watch.endpoints]])."""

    name: str = Field(description="Its name.")
    health_url: str = Field(description="Its health URL (empty: not polled).")
    metrics_url: str = Field(description="Its metrics URL (empty: not scraped).")
    polls: int = Field(description="/health polls made of it.")
    not_ok: int = Field(description="Of those, the ones not answered 200.")
    died_at_s: float | None = Field(description="When it died: the first poll not 200 after its last 200, none "
                                    "coming after it to the end of the run (null: it did not).")
    kv_usage_peak: float | None = Field(description="The highest KV usage its metrics gave (null: none read).")
    waiting_peak: float | None = Field(description="The most requests waiting its metrics gave.")


class EndpointHealth(_Model):
    """A replica's /health over the run."""

    pre: int | str | None = Field(description="Its first poll's status (a status code, or 'unreachable').")
    post: int | str | None = Field(description="Its last poll's status (the target's: the poll after the load).")
    slow: int = Field(description="Polls slower than [watch] health_timeout_s.")


class EndpointTtft(_Model):
    p50: float | None = Field(None, description="The median time to first token, ms.")
    p95: float | None = Field(None, description="Its 95th percentile, ms.")


class EndpointInfo(_Model):
    """One replica of the target ([target] replicas; replica-0 is the target itself): what was sent to it and
    what it did."""

    name: str = Field(description="replica-0 (the target), replica-1, ... in the order given.")
    url: str = Field(description="Its OpenAI-compatible URL.")
    requests: int = Field(description="Requests sent to it (counted over every record, kept in memory or not).")
    by_outcome: dict[str, int] = Field(description="Those requests by outcome.")
    ttft_ms: EndpointTtft = Field(description="Its requests' time to first token.")
    health: EndpointHealth = Field(description="Its /health before, after and how often slow.")
    died_at_s: float | None = Field(description="When it left service for good (null: it did not): the target's "
                                    "death as engine_death judges it; another replica's first poll not 200 after its "
                                    "last 200 (rule replica_death).")


class CanaryInfo(_Model):
    """The canaries of a run ([watch] canary_interval_s): salted one-token requests outside the workload."""

    sent: int = Field(description="Canaries sent.")
    ok: int = Field(description="Canaries that got their token and finished.")
    ttft_ms: Percentiles = Field(description="Sent to their token, over those that got one.")
    by_outcome: dict[str, int] = Field(description="Canaries by outcome.")


class WrongAnswer(_Model):
    """One answer under load that was not the one the same request gets alone."""

    request: int = Field(description="The request's id (requests.jsonl, workload.jsonl.gz).")
    conversation: int = Field(description="Its conversation.")
    turn: int = Field(description="Its turn.")
    kind: str = Field(description="diverged, garbled or cross_talk.")
    position: int | None = Field(description="The first output position where the two answers differ.")
    load_token: str = Field(description="The token there under load (empty: the answer had ended).")
    reference_token: str = Field(description="The token there when the request was sent alone.")
    margin: float | None = Field(description="Nats by which the reference's token led its runner-up there.")
    cached_tokens: int | None = Field(description="Prompt tokens the target reported cached for the load request.")
    detail: str = Field(description="What made it garbled or cross-talk.")


class OutputsInfo(_Model):
    """Answers checked under load ([verify]): each checked request's answer under load against the same request
    sent alone on the idle engine afterwards."""

    mode: str = Field(description="sample or all.")
    checked: int = Field(description="Answers checked.")
    identical: int = Field(description="The same over the compared tokens.")
    near_tie: int = Field(description="First different where the reference's token led its runner-up by less than "
                          "min_margin nats: batching's floating-point noise, not a failure.")
    diverged: int = Field(description="First different where the reference's token led by at least min_margin: "
                          "wrong answers (rule wrong_output).")
    garbled: int = Field(description="U+FFFD, a runaway repeated token, or no text for counted tokens, where the "
                         "reference has none (rule garbled_output).")
    cross_talk: int = Field(description="Carrying another conversation's tag (rule cross_talk).")
    unverifiable: int = Field(description="Different, with no logprobs to tell a near-tie from a wrong answer, or "
                              "without a reference.")
    compare_tokens: int = Field(description="Output positions compared.")
    min_margin: float = Field(description="The margin, in nats, that separates a wrong answer from a near-tie.")
    near_tie_margin_max: float | None = Field(description="The largest margin among the near-ties.")
    worst: list[WrongAnswer] = Field(description="The wrong answers (diverged, garbled, cross-talk), first 20 by "
                                     "request.")


class ChaosRow(_Model):
    at_s: float = Field(description="When the fault was caused (when it was due, if never caused), seconds into the "
                        "load.")
    action: str = Field(description="kill, restart, pause, abort_burst, oversize or malformed.")
    done_s: float = Field(description="When loadrepro's part of it ended (the engine started again after a kill or "
                          "restart, SIGCONT after a pause; at_s for the others), seconds into the load: the times "
                          "below count from here.")
    recovered: bool | None = Field(description="The engine was back to its state before within recover_within_s "
                                   "(null: the fault was never caused, see detail).")
    recovery_s: float | None = Field(
        description="Seconds until every part judged was back, from when loadrepro's part of the fault ended (the "
        "engine started again after a kill or restart, SIGCONT after a pause; the fault itself for the others).")
    recover_within_s: float = Field(description="How long it had ([[chaos.events]] recover_within_s).")
    health_s: float | None = Field(description="Seconds until /health answered 200 again (from the same moment).")
    ttft_s: float | None = Field(
        description="Seconds until first tokens came within max_ttft_growth of before (null: not seen or not judged).")
    running_s: float | None = Field(
        description="Seconds until the engine ran no more requests than loadrepro had in flight (null: not seen or "
        "not judged).")
    before_ttft_p95_ms: float | None = Field(
        description="TTFT p95 of the last 16 requests completed that were sent before it (since any earlier fault).")
    before_running: float | None = Field(description="The engine's running requests at the last scrape before it.")
    before_kv_usage: float | None = Field(
        description="The engine's lowest KV usage at a quiet moment (nothing running or waiting) before it.")
    kv_s: float | None = Field(
        description="Seconds until KV usage at a quiet moment was within max_kv_leak of before_kv_usage (null: not "
        "seen or not judged); not counted in recovery_s, since when quiet moments come is the load's doing.")
    after_kv_usage: float | None = Field(
        description="KV usage at the last quiet moment after it, up to the next fault (null: none); more than "
        "max_kv_leak above before_kv_usage is blocks the engine never freed, and the fault not recovered from.")
    faulted: int = Field(description="Requests that failed while it was in effect (outcome faulted).")
    detail: str = Field(description="What was done, what the engine did, and each part of its way back, in words.")

    @field_validator("*")
    @classmethod
    def _to_the_millisecond(cls, value: object) -> object:
        """Read from the judge's measurement (judge/recovery.Recovery) as it is; its seconds and ratios to 3 places."""
        return round(value, 3) if isinstance(value, float) else value


class TrialRow(_Model):
    index: int = Field(description="The trial's number, from 1.")
    seed: int = Field(description="Its workload seed.")
    verdict: VerdictStatus = Field(description="pass or fail.")
    failing_rules: list[str] = Field(description="The rules whose failures failed it.")
    first_failure_s: float | None = Field(description="When its first request failed, seconds into its load.")
    run_dir: str = Field(description="Its run directory, with its own reports.")


class TrialsInfo(_Model):
    n: int = Field(description="Trials run.")
    planned: int = Field(description="Trials asked for (--trials); fewer ran when the answer was decided early.")
    failed: int = Field(description="Trials that failed.")
    failure_rate: float = Field(description="failed / n.")
    ci95: list[float] = Field(description="Exact (Clopper-Pearson) 95% interval of the failure rate, [low, high].")
    signatures: dict[str, int] = Field(description="Each failing rule, and in how many trials it failed.")
    first_failure_s: list[float] = Field(description="Each failing trial's first failure, seconds into its load.")
    vary_seed: bool = Field(description="Whether each trial had its own seed (seed, seed+1, ...).")
    trials: list[TrialRow] = Field(description="Each trial, in the order run.")


class Timing(_Model):
    """What a run costs beside its load, in seconds."""

    to_first_request_s: float | None = Field(description="From the start to the load's first request: starting the "
                                             "engine, planning, counting lengths. The start is the process's for "
                                             "`loadrepro run` and `ab` (its imports counted), else when this run "
                                             "began (a Python call, a trial, a shrink's run, an A/B's patched side).")
    last_answer_to_verdict_s: float | None = Field(description="From the last answer to the verdict: the grace for "
                                                   "requests in flight, the post-run health poll, judging.")


class Liveness(_Model):
    """What a liveness probe with the deployment's settings ([watch] liveness_*) would have done to the engine."""

    timeout_s: float = Field(description="The probe's timeout.")
    period_s: float = Field(description="How often it probes.")
    failures: int = Field(description="Failed probes in a row that restart the engine.")
    would_restart_at_s: float | None = Field(description="When it would have restarted the engine; null: never.")


class FirstFailure(_Model):
    t_s: float = Field(description="When it ended, seconds since the load started.")
    request: int = Field(description="The request's id.")
    outcome: str = Field(description="Its outcome.")
    detail: str = Field(description="The target's error text, or why the outcome was chosen.")
    conversation: int = Field(description="Its conversation.")
    turn: int = Field(description="Its turn.")
    status: int | None = Field(description="Its HTTP status.")


class SignatureCount(_Model):
    name: str = Field(description="The signature's name.")
    class_: str = Field(alias="class", description="F fatal, P propagation, T temporary, R recoverable.")
    count: int = Field(description="How often it was seen.")
    first_t_s: float = Field(description="First seen, seconds since the load started.")
    sample: str = Field(description="The first text that matched.")


class RuleResult(_Model):
    name: str = Field(description="The rule.")
    fired: bool = Field(description="Whether it found something.")
    severity: Severity | None = Field(description="fail or info, when it fired.")
    detail: str = Field(description="What it found, in words.")


class Pressure(_Model):
    kv_usage_peak: float | None = Field(description="The highest KV usage the engine published.")
    waiting_peak: float | None = Field(description="The most requests it had waiting.")
    preemptions: float | None = Field(description="Preemptions (SGLang: retractions) during the run.")
    pool_usage_peak: dict[str, float] = Field(
        {}, description="Per KV pool the engine reports blocks for (the simulated engine), its peak usage.")


class LogPlace(_Model):
    process: str = Field(description="The process (rank) that logged it.")
    signature: str = Field(description="The signature it matched.")
    file: str = Field(description="The log file.")
    line: int = Field(description="The line number.")
    timestamp: str | None = Field(description="The time the line carries.")
    text: str = Field(description="The line.")


class DiagnosisInfo(_Model):
    """The engine-log analysis of a run whose engine log loadrepro kept."""

    fatal: bool = Field(description="A fatal signature was found.")
    pressure_only: bool = Field(description="Only pressure was logged (retractions, waiting), nothing fatal.")
    initiating: LogPlace | None = Field(description="The first fatal line of the process that failed first.")
    collateral: list[LogPlace] = Field(description="Fatal lines of the other processes, which followed it.")
    figures: dict[str, float] = Field(description="Capacity figures the engine logged (pool sizes, blocks).")
    capacity: str = Field(description="What those figures say of the KV pools.")
    next_step: str = Field(description="What to do next.")
    verification: str = Field(description="How to check a fix.")


class Environment(_Model):
    loadrepro_version: str = Field(description="loadrepro's version.")
    python: str = Field(description="Python's version.")
    platform: str = Field(description="The operating system and machine.")


class RequestRow(_Model):
    id: int = Field(description="The request's id.")
    conversation: int = Field(description="Its conversation.")
    turn: int = Field(description="Its turn.")
    outcome: str = Field(description="Its outcome.")
    status: int | None = Field(description="Its HTTP status.")
    ttft_ms: float | None = Field(description="Sent -> first token.")
    e2e_ms: float | None = Field(description="Sent -> end.")
    output_tokens: int | None = Field(description="Tokens it received.")
    cached_tokens: int | None = Field(description="Prompt tokens the target reported cached.")
    shared_prefix_tokens: int = Field(description="Planned tokens it shares with an earlier request.")
    prediction: str | None = Field(None, description="What the KV arithmetic predicted: fits, must_wait or never_fits.")
    limit: str = Field("", description="Which limit the prediction names.")
    ttfc_ms: float | None = Field(None, description="Sent -> first content token.")
    answer: str | None = Field(None, description="[verify]: how its answer compared with the same request alone "
                               "(identical, near_tie, diverged, garbled, cross_talk, unverifiable); null: not checked.")


class CapacityInfo(_Model):
    source: str = Field(description="Where the limits came from.")
    tokens_per_block: int = Field(description="Tokens per KV block.")
    pool_tokens: int = Field(description="Tokens the binding KV pool holds.")
    draft_pool_tokens: int | None = Field(description="Tokens the draft pool holds, when there is one.")
    index_entries: int | None = Field(description="Entries of the page-index table, when sized.")
    max_seq_len: int = Field(description="The longest sequence.")
    beam_width: int = Field(description="Beams per request.")
    outcomes_by_prediction: dict[str, dict[str, int]] = Field(
        description="For each prediction, the outcomes its requests had.")


class WindowRow(_Model):
    """One window of a long run ([verdict] window_s), by the time its requests were sent."""

    index: int = Field(description="1-based.")
    start_s: float = Field(description="Seconds since the load started.")
    end_s: float = Field(description="Its end.")
    requests: int = Field(description="Requests sent in it.")
    outcomes: dict[str, int] = Field(description="Those requests by outcome.")
    failed: int = Field(description="Those that failed.")
    ttft_p50_ms: float | None = Field(description="Median TTFT of its requests.")
    ttft_p95_ms: float | None = Field(description="95th percentile TTFT.")
    ttft_p95_bounds_ms: tuple[float, float] | None = Field(
        None, description="The interval its TTFT p95 lies in with 95% confidence, whatever the distribution (the "
        "values at the ranks a binomial count bounds): what the degradation rule compares. Wide on a few dozen "
        "requests; with fewer than 72, its upper end is their slowest (a p95 cannot be bounded from above).")
    itl_p50_ms: float | None = Field(description="Median gap between token chunks.")
    itl_p95_ms: float | None = Field(description="95th percentile gap.")
    kv_usage_max: float | None = Field(description="The highest KV usage scraped in it.")
    kv_usage_quiet: float | None = Field(description="The lowest KV usage while nothing ran or waited.")
    waiting_max: float | None = Field(description="The most requests waiting.")
    preemptions: float | None = Field(description="The preemption counter's growth in it.")
    ended: int = Field(0, description="Requests that ended in it (sent in it or before), to the second.")
    in_flight_end: int = Field(0, description="Requests loadrepro had in flight when it ended, to the second.")
    due: int = Field(0, description="Requests due in it (loadrepro's arrivals, sent then, later or never).")
    unsent_end: int = Field(0, description="Requests due that were still waiting in loadrepro to be sent when it "
                            "ended (its concurrency full), to the second.")
    slo_attainment: float | None = Field(None, description="[slo]: the share of the requests sent in it (to the "
                                         "second) that met the service level (null: none set, or none judged).")


class SloMissed(_Model):
    ttft: int = Field(description="Requests whose time to first token was over [slo] ttft_ms.")
    itl: int = Field(description="Requests whose mean inter-token latency was over [slo] itl_ms.")
    e2e: int = Field(description="Requests whose end-to-end time was over [slo] e2e_ms.")
    failed: int = Field(description="Requests that failed (a failed request never meets the service level).")


class SloInfo(_Model):
    """The requests against the service level ([slo]); cancelled requests and those a fault on purpose failed are
    not judged."""

    limits_ms: dict[str, float] = Field(description="The limits set: ttft, itl (a request's mean), e2e.")
    attainment: float | None = Field(description="The share of the judged requests that met every limit.")
    requests: int = Field(description="The requests judged: sent from from_s on.")
    met: int = Field(description="Those that met every limit.")
    from_s: int = Field(description="Requests sent from this second of the load on are judged: where the steady "
                        "state began (requests in flight first at their level), or 0 with include_ramp_up.")
    steady_state: bool = Field(description="True: the ramp-up before from_s is not judged; false: every request.")
    in_flight_level: float = Field(description="The steady level of requests in flight (their median over the "
                                   "seconds requests were sent in).")
    goodput_requests_per_s: float = Field(description="Requests that met it per second, from from_s to the last "
                                          "answer.")
    goodput_tokens_per_s: float = Field(description="Their output tokens per second, over the same span.")
    missed: SloMissed = Field(description="The judged requests that missed it, by limit (a request may miss several).")
    whole_run_attainment: float | None = Field(description="The share over every request, ramp-up included.")
    client_queue_p95_ms: float | None = Field(description="loadrepro's own time per request before sending it (a "
                                              "concurrency slot, due to sent), 95th percentile: latency the engine's "
                                              "figures above do not include.")


class RunReport(_Model):
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
    stop_reason: str = Field(description="done, duration, saturated, engine_death, interrupted or worker_crashed.")
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
