"""The sections of report.json (schema/run_report.py's RunReport holds them): latency, health, workload, the
chaos table, windows, the service level and the rest, each field described."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from loadrepro.schema.report_kinds import Model, Severity


class Percentiles(Model):
    p50: float | None = Field(None, description="The median.")
    p95: float | None = Field(None, description="The 95th percentile.")
    p99: float | None = Field(None, description="The 99th percentile.")
    max: float | None = Field(None, description="The largest value.")
    count: int | None = Field(None, description="How many values these are drawn from (what they are: the row's "
                                                "description says).")


class Latency(Model):
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


class Throughput(Model):
    requests_per_s: float = Field(description="Completed requests per second of the run.")
    output_tokens_per_s: float = Field(description="Output tokens per second of the run, every request's.")


class Cache(Model):
    prompt_tokens: int = Field(description="Prompt tokens the target counted, over every request.")
    cached_tokens: int | None = Field(
        description="Of those, the ones it reported cached; null: the target reports none.")


class TokenSpread(Model):
    p50: int = Field(description="The median.")
    p95: int = Field(description="The 95th percentile.")
    max: int = Field(description="The largest.")


class PrefixReuse(Model):
    possible_tokens: int = Field(
        description="Prompt tokens of the completed requests that a perfect prefix cache could have served: what "
        "each shares with an earlier request of the workload (a trace: the blocks seen earlier in it), none for a "
        "turn sent where its prefix never was (another replica than its turn before, an engine restarted since).")
    cached_tokens: int | None = Field(
        description="The cached prompt tokens the usage of those requests reported, of each that possible_tokens "
        "counts some of; null: the target reports none.")
    ratio: float | None = Field(
        description="cached_tokens / possible_tokens; null when the target reports none or nothing could be served.")
    own_tokens: int | None = Field(
        None, description="Agent workloads: of possible_tokens, those each request's own tree (its agent and "
        "subagents) had sent before; the rest only other trees had (a router keeping a tree on one replica serves "
        "these, not the rest). Null: a workload of no trees.")


class WorkloadInfo(Model):
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


class Target(Model):
    base_url: str = Field(description="The target's URL.")
    model: str = Field(description="The model asked for.")
    engine_cmd: str | None = Field(None, description="The command that started the engine, when loadrepro started it.")


class Requests(Model):
    total: int = Field(description="Requests sent or given up, every one.")
    by_outcome: dict[str, int] = Field(description="Requests by outcome.")
    reconnects: int = Field(
        0, description="Requests resent at once because a pooled connection was closed (not outcomes).")
    conversations: int = Field(0, description="Conversations that ran (their first turns were sent): a soak "
                               "repeats the planned ones.")
    later_turns_not_sent: int = Field(0, description="Planned later turns never sent because the turn before them "
                                      "in their conversation failed or was refused: a conversation goes on only from "
                                      "an answer. Not counted in total.")


class WorkersInfo(Model):
    """What sent the load: this process, or worker processes on this machine (`--workers N`)."""

    count: int = Field(description="Processes or actors that sent the load.")
    backend: str = Field(description="in-process, processes or ray.")


class CalibrationInfo(Model):
    """How the workload's lengths were counted."""

    source: str = Field(description="What counted the tokens.")
    probe_requests: int = Field(description="Requests sent to the engine to count tokens (no tokenize endpoint).")
    probe_tokens: int = Field(description="Prompt tokens those requests carried.")


class WorstLength(Model):
    request: int = Field(description="The request's id.")
    conversation: int = Field(description="Its conversation.")
    turn: int = Field(description="Its turn.")
    planned: int = Field(description="The prompt length planned.")
    measured: int = Field(description="The length the target counted.")


class Lengths(Model):
    """Planned prompt lengths against the target's usage.prompt_tokens; errors are shares of the planned length."""

    requests: int = Field(description="Requests whose usage reported prompt tokens.")
    error_p50: float | None = Field(description="Median of |error|.")
    error_p95: float | None = Field(description="95th percentile of |error|.")
    error_max: float | None = Field(description="Largest |error|.")
    bias: float | None = Field(description="Mean signed error: + the target counted more than planned.")
    worst: WorstLength | None = Field(description="The request furthest from its plan.")


class Transition(Model):
    t_s: float = Field(description="Seconds since the load started.")
    status: int | str = Field(description="The /health status from then on.")


def health_said(status: int | str | None) -> str:
    """A /health status as the reports say it: None where it was not polled ([watch] health_path empty)."""
    return "not polled" if status is None else str(status)


class Health(Model):
    pre: int | str | None = Field(description="/health before the run.")
    post: int | str | None = Field(description="/health right after the run.")
    transitions: list[Transition] = Field(description="Each change of /health status during the run.")
    path: str = Field("/health", description="The health path that was polled ([watch] health_path).")
    latency_ms: Percentiles = Field(Percentiles(), description="How long the polls took to answer (an unanswered "
                                    "poll counts at the time it was given up).")
    slow: int = Field(0, description="Polls slower than [watch] health_timeout_s.")
    owner: str | None = Field(None, description="Whose health the path tells when it is not the engine's: a "
                              "gateway in front of it, with how it was recognised.")


class EngineMemoryInfo(Model):
    """The engine's memory: for one loadrepro started, its process group's, read from /proc beside the health polls;
    for a target at a URL, the resident memory its /metrics publish (process_resident_memory_bytes)."""

    source: Literal["proc", "metrics"] = Field(
        "proc", description="proc: the process group loadrepro started, from /proc; metrics: the target's "
        "process_resident_memory_bytes (vLLM: its API server process, not the EngineCore that holds the KV cache).")

    start_mb: float = Field(description="Resident memory at the first reading, MiB.")
    peak_mb: float = Field(description="The highest resident memory read, MiB.")
    warm_mb: float = Field(description="At the end of the warm-up (the first fifth of the requests served), MiB.")
    end_mb: float = Field(description="At the last reading, once the load ended and the engine was idle, MiB.")
    anon_end_mb: float | None = Field(
        description="Of that, anonymous memory (not the mapped model file), MiB (null: not published).")
    swap_peak_mb: float | None = Field(
        description="The most swapped out at once, MiB (growth hidden in swap; null: not published).")
    growth_mb: float = Field(description="end_mb less warm_mb (rule engine_memory_growth).")
    growth_per_1000_requests_mb: float | None = Field(
        description="Resident memory fitted against the requests served after the warm-up: MiB per 1,000 requests "
        "(null: too few readings).")
    r: float | None = Field(description="How closely memory followed the requests served (Pearson's r; null: too few "
                            "readings, or flat).")
    readings: int = Field(description="Readings kept.")
    not_judged: str | None = Field(
        None, description="Why rule engine_memory_growth did not judge the growth (too few readings or requests "
        "after the warm-up, an interrupt, a fault on purpose, an engine that left service); null: it was judged.")
    plateaued: bool = Field(
        False, description="The growth levelled off over the last third of the requests (at most a tenth of the "
        "whole rate): bounded, a pool or cache that filled, not a leak.")
    cache_cap_mb: float | None = Field(
        None, description="The cap of a prompt cache the engine keeps in RAM by design (llama.cpp's --cache-ram, "
        "from its command; 8192 MiB by default): growth within it is not judged a leak (null: none known).")


class SpeculativeInfo(Model):
    """Speculative decoding as the engine reported it: per request (llama.cpp's timings.draft_n, draft_n_accepted), or
    by its /metrics counters (vLLM's spec_decode_num_draft_tokens, spec_decode_num_accepted_tokens)."""

    source: Literal["requests", "metrics"] = Field(
        "requests", description="requests: each answer's counts; metrics: the growth of the engine's counters over "
        "the run (no per-request figures; early and late are thirds of the run's time).")
    requests: int = Field(description="Requests for which the engine drafted tokens (0: read from /metrics).")
    draft_tokens: int = Field(description="Tokens drafted for them.")
    accepted_tokens: int = Field(description="Of those, accepted.")
    acceptance_rate: float = Field(description="accepted_tokens / draft_tokens.")
    early_rate: float | None = Field(description="The acceptance of the first third of those requests, in the order "
                                     "they ended (null: fewer than 6).")
    late_rate: float | None = Field(description="The acceptance of the last third (rule spec_acceptance_collapse).")
    per_request: list[float] = Field(description="Each such request's acceptance, in the order they ended (the "
                                     "first 1,000).")


class AgentsInfo(Model):
    """Agent trees (an agent and the subagents it spawned), as they ran: an agent trace's or agents from the seed."""

    trees: int = Field(description="Agents that spawned subagents.")
    completed: int = Field(description="Of those, trees every request of which was sent and answered.")
    subagents: int = Field(description="Subagents in all.")
    fanout_max: int = Field(description="The most subagents one agent spawned.")
    makespan_s_p50: float | None = Field(description="A tree's makespan (its first request sent to its last answer), "
                                         "median, seconds, over the trees every request of which ran.")
    makespan_s_p95: float | None = Field(description="The same, 95th percentile.")
    joins: int = Field(description="Turns that waited for subagents (theirs ran).")
    join_wait_s_total: float = Field(description="Seconds those turns waited for their subagents after the agent's "
                                     "turn before them answered, in all.")
    join_wait_s_max: float = Field(description="The longest one such wait, seconds.")


class StructuredInfo(Model):
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


class CanaryInfo(Model):
    """The canaries of a run ([watch] canary_interval_s): salted one-token requests outside the workload."""

    sent: int = Field(description="Canaries sent.")
    ok: int = Field(description="Canaries that got their token and finished.")
    ttft_ms: Percentiles = Field(description="Sent to their token, over those that got one.")
    by_outcome: dict[str, int] = Field(description="Canaries by outcome.")


class WrongAnswer(Model):
    """One answer under load that was not the one the same request gets alone."""

    request: int = Field(description="The request's id (requests.jsonl, workload.jsonl.zst).")
    conversation: int = Field(description="Its conversation.")
    turn: int = Field(description="Its turn.")
    kind: str = Field(description="diverged, garbled or cross_talk.")
    position: int | None = Field(description="The first output position where the two answers differ.")
    load_token: str = Field(description="The token there under load (empty: the answer had ended).")
    reference_token: str = Field(description="The token there when the request was sent alone.")
    margin: float | None = Field(description="Nats by which the reference's token led its runner-up there.")
    cached_tokens: int | None = Field(description="Prompt tokens the target reported cached for the load request.")
    detail: str = Field(description="What made it garbled or cross-talk.")


class OutputsInfo(Model):
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


class Timing(Model):
    """What a run costs beside its load, in seconds."""

    to_first_request_s: float | None = Field(description="From the start to the load's first request: starting the "
                                             "engine, planning, counting lengths. The start is the process's for "
                                             "`loadrepro run` and `ab` (its imports counted), else when this run "
                                             "began (a Python call, a trial, a shrink's run, an A/B's patched side).")
    last_answer_to_verdict_s: float | None = Field(description="From the last answer to the verdict: the grace for "
                                                   "requests in flight, the post-run health poll, judging.")


class FirstFailure(Model):
    t_s: float = Field(description="When it ended, seconds since the load started.")
    request: int = Field(description="The request's id.")
    outcome: str = Field(description="Its outcome.")
    detail: str = Field(description="The target's error text, or why the outcome was chosen.")
    conversation: int = Field(description="Its conversation.")
    turn: int = Field(description="Its turn.")
    status: int | None = Field(description="Its HTTP status.")


class SignatureCount(Model):
    name: str = Field(description="The signature's name.")
    class_: str = Field(alias="class", description="F fatal, P propagation, T temporary, R recoverable.")
    count: int = Field(description="How often it was seen: requests + log_lines.")
    requests: int = Field(0, description="The run's requests that ended with its text (over the kept records).")
    failed_requests: int = Field(0, description="Of those, the requests that failed (HTTP 5xx, a stream error...).")
    log_lines: int = Field(0, description="The engine log's lines with it.")
    first_t_s: float = Field(description="First seen, seconds since the load started.")
    sample: str = Field(description="The first text that matched.")


class RuleResult(Model):
    name: str = Field(description="The rule.")
    fired: bool = Field(description="Whether it found something.")
    severity: Severity | None = Field(description="fail or info, when it fired.")
    detail: str = Field(description="What it found, in words.")
    facts: dict[str, int | float | str] = Field(
        {}, description=("What it found as named numbers and names, the detail's figures for a program to read "
                         "(each rule's keys: docs/reference/rules.md); empty when it did not fire."))


class Pressure(Model):
    kv_usage_peak: float | None = Field(description="The highest KV usage the engine published.")
    waiting_peak: float | None = Field(description="The most requests it had waiting.")
    preemptions: float | None = Field(description="Preemptions (SGLang: retractions) during the run.")
    pool_usage_peak: dict[str, float] = Field(
        {}, description="Per KV pool the engine reports blocks for (the simulated engine), its peak usage.")


class LogPlace(Model):
    process: str = Field(description="The process (rank) that logged it.")
    signature: str = Field(description="The signature it matched.")
    file: str = Field(description="The log file.")
    line: int = Field(description="The line number.")
    timestamp: str | None = Field(description="The time the line carries.")
    text: str = Field(description="The line.")


class DiagnosisInfo(Model):
    """The engine-log analysis of a run whose engine log loadrepro kept."""

    fatal: bool = Field(description="A fatal signature was found.")
    failed: bool = Field(False, description=(
        "The engine failed: a fatal signature, a request that failed (HTTP 5xx, a stream error...) with a known "
        "error text, or the run's verdict."))
    pressure_only: bool = Field(description="Only pressure was logged (retractions, waiting), and nothing failed.")
    counts: dict[str, int] = Field(default_factory=dict, description="Per signature, the engine log's lines with it.")
    requests: dict[str, int] = Field(default_factory=dict, description=(
        "Per signature, the run's requests that ended with its text (over the kept records)."))
    failed_requests: dict[str, int] = Field(default_factory=dict, description=(
        "Of those, per signature, the requests that failed: a failure whatever the signature's class."))
    engine: str = Field("", description="The engine the signatures are of, whose flags the next step names.")
    initiating: LogPlace | None = Field(description="The first fatal line of the process that failed first.")
    collateral: list[LogPlace] = Field(description="Fatal lines of the other processes, which followed it.")
    figures: dict[str, float] = Field(description="Capacity figures the engine logged (pool sizes, blocks).")
    capacity: str = Field(description="What those figures say of the KV pools.")
    next_step: str = Field(description="What to do next.")
    verification: str = Field(description="How to check a fix.")


class Environment(Model):
    loadrepro_version: str = Field(description="loadrepro's version.")
    python: str = Field(description="Python's version.")
    platform: str = Field(description="The operating system and machine.")


class RequestRow(Model):
    id: int = Field(description="The request's id.")
    conversation: int = Field(description="Its conversation.")
    turn: int = Field(description="Its turn.")
    outcome: str = Field(description="Its outcome.")
    status: int | None = Field(description="Its HTTP status.")
    ttft_ms: float | None = Field(description="Sent -> first token.")
    e2e_ms: float | None = Field(description="Sent -> end.")
    output_tokens: int | None = Field(description="Tokens it received.")
    cached_tokens: int | None = Field(description="Prompt tokens the target reported cached.")
    shared_prefix_tokens: int = Field(description=(
        "Planned tokens it shares with an earlier request, expected from the prefix cache; 0 when it was sent where "
        "its prefix never was (another replica than its turn before, an engine restarted since)."))
    prediction: str | None = Field(None, description="What the KV arithmetic predicted: fits, must_wait or never_fits.")
    limit: str = Field("", description="Which limit the prediction names.")
    ttfc_ms: float | None = Field(None, description="Sent -> first content token.")
    answer: str | None = Field(None, description="[verify]: how its answer compared with the same request alone "
                               "(identical, near_tie, diverged, garbled, cross_talk, unverifiable); null: not checked.")


class CapacityInfo(Model):
    source: str = Field(description="Where the limits came from.")
    tokens_per_block: int = Field(description="Tokens per KV block.")
    pool_tokens: int = Field(description="Tokens the binding KV pool holds.")
    draft_pool_tokens: int | None = Field(description="Tokens the draft pool holds, when there is one.")
    index_entries: int | None = Field(description="Entries of the page-index table, when sized.")
    max_seq_len: int = Field(description="The longest sequence.")
    beam_width: int = Field(description="Beams per request.")
    outcomes_by_prediction: dict[str, dict[str, int]] = Field(
        description="For each prediction, the outcomes its requests had: every request of the run, kept in "
        "memory or not.")
