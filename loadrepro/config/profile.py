"""Profiles: the TOML description of one reproduction (traffic, load, watching, verdict), validated strictly: its
sections but [workload] (config/workload_spec.py), and the Profile that holds them. Every key is checked: a typo is
an error that names the key. Reading, overriding and writing a profile: config/profile_files.py."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from loadrepro.config.section import Section
from loadrepro.config.workload_spec import WorkloadSpec

HEALTH_GIVE_UP = 4  # a /health poll with no answer after this many health_timeout_s is unreachable

# The generation APIs a target may serve (workload/apis.py writes a request for each).
Api = Literal["chat", "completions", "responses", "messages"]
# The faults on purpose a [[chaos.events]] entry may cause (load/chaos.py).
ChaosAction = Literal["kill", "restart", "pause", "abort_burst", "oversize", "malformed"]
MalformedKind = Literal["invalid_utf8", "bad_json", "wrong_types", "huge_body", "negative_max_tokens", "bad_grammar"]
# What sends the load: this process, worker processes (--workers), Ray actors (--ray): load/backend/.
BackendName = Literal["in-process", "processes", "ray"]
# How requests are spread over replicas ([target] routing): in turn, or every turn of a conversation (a trace's
# session) on one replica, as a prefix-aware router keeps it.
Routing = Literal["round_robin", "session"]
# How conversations start ([load] arrival): load/shapes.py draws the start times of every one but closed.
Arrival = Literal["closed", "poisson", "bursts", "series", "zigzag"]
BURST_SIZE, BURST_EVERY_S, PERIOD_S = 8, 1.0, 4.0  # the defaults of burst_size, burst_every_s and period_s
# The keys of one arrival only: any other arrival given one of them is an error that says which arrival it needs.
_ARRIVAL_KEYS = {"burst_size": "bursts", "burst_every_s": "bursts", "idle_s": "bursts", "rates": "series",
                 "rate_low": "zigzag", "period_s": "zigzag"}


class RateStep(Section):
    """One step of an arrival series ([[load.rates]])."""

    seconds: float = Field(gt=0, description="How long the step lasts; the last step's rate goes on after it until "
                           "the conversations run out.")
    rate: float = Field(ge=0, description="Conversations started per second during the step, as Poisson arrivals; "
                        "0: a pause.")


class LoadSpec(Section):
    concurrency: int = Field(12, ge=1, description="Requests in flight at most (warm-ups included), or sessions "
                             "with concurrency_unit = 'session'.")
    concurrency_unit: Literal["request", "session"] = Field(
        "request", description="What concurrency counts: requests in flight, or sessions (a conversation, or an agent "
        "and its subagents) begun and not ended; their requests are then as many as they send at once.")
    arrival: Arrival = Field(
        "closed",
        description=("closed: start a request as soon as a slot frees; poisson: start conversations at `rate` per "
                     "second; bursts: `burst_size` at once every `burst_every_s`, after `idle_s` of quiet; series: "
                     "Poisson arrivals at each of `rates`' steps in turn; zigzag: Poisson arrivals at a rate going "
                     "from `rate_low` up to `rate` and back every `period_s`. Every arrival but closed starts "
                     "conversations until they run out (a soak: until its duration ends), drawn from the run's seed."))
    rate: float = Field(0.0, ge=0, description="Conversations started per second: arrival = 'poisson' (its rate) or "
                        "'zigzag' (the peak). With --workers N each worker starts rate / N.")
    burst_size: int | None = Field(
        None, ge=1, description=f"arrival = 'bursts': conversations started at once (unset: {BURST_SIZE}), until they "
        "run out; as many as the workload has: one burst. With --workers N each worker starts its own conversations "
        "of each burst, at the burst's time: together the workers' bursts are the run's, of burst_size each.")
    burst_every_s: float | None = Field(
        None, gt=0, description=f"arrival = 'bursts': seconds from one burst's start to the next (unset: "
        f"{BURST_EVERY_S:g}).")
    idle_s: float | None = Field(
        None, ge=0, description="arrival = 'bursts': seconds of quiet before the first burst, so that it meets an idle "
        "engine (unset: 0).")
    rates: tuple[RateStep, ...] = Field(
        (), description="arrival = 'series': the steps ([[load.rates]]: seconds, rate), each in turn; after the last "
        "step its rate goes on until the conversations run out. At least one step, the last one's rate > 0. A ramp "
        "to past saturation and back is a series. With --workers N each worker starts each step's rate / N.")
    rate_low: float | None = Field(
        None, ge=0, description="arrival = 'zigzag': the rate at the trough, conversations per second, at most "
        "`rate` (unset: 0). With --workers N each worker's is rate_low / N.")
    period_s: float | None = Field(
        None, gt=0, description=f"arrival = 'zigzag': seconds from the trough up to the peak (`rate`) and down again "
        f"(unset: {PERIOD_S:g}), again and again.")
    fresh_connections: bool = Field(
        False, description="Send every request of the load on a new TCP connection, closed after its answer "
        "(Connection: close, no keep-alive), as clients behind some proxies do; false: connections are kept alive "
        "and reused.")
    duration_s: float = Field(
        0, ge=0, description="> 0: a soak of this many seconds, repeating the plan; 0: run the plan once.")
    cancel_fraction: float = Field(
        0.0, ge=0, le=1, description="Share of streams cancelled part-way (a soak's client disconnects).")
    request_timeout_s: float = Field(900, gt=0, description="The longest a request may take.")
    stall_timeout_s: float = Field(
        60, gt=0,
        description="Silence after the first token, or of the whole engine while requests wait, that is a stall.")
    ttft_timeout_s: float = Field(
        0, ge=0, description="> 0: the longest wait for a first token (else request_timeout_s bounds it).")
    stop_on_death: bool = Field(True, description="Stop starting requests once the engine is judged dead.")
    stop_when_saturated: bool = Field(
        False, description="End the load once it is saturated (rule saturated: the queue grew window after window "
        "under a steady service, nothing failing), checked at the end of each window.")
    max_retries: int = Field(
        3, ge=0,
        description="Retries of 429, 503 with Retry-After, and 503 in a stream, before the request is `throttled`.")
    checkpoint_s: float | None = Field(
        None, ge=0, description="Reports rewritten this often while the run goes on (unset: 60 s in soaks; 0: never).")
    max_rps: float = Field(0.0, ge=0, description="> 0: at most this many request starts in any one second.")
    warmup_requests: int = Field(
        0, ge=0, description="Requests sent before the load, at most concurrency at once, and not judged, so that an "
        "engine's cold start (kernels compiled, buffers allocated at its first requests) is not judged as its failure: "
        "each one of the run's first requests in shape (lengths, max_tokens, parameters), its words shuffled and "
        "salted, so that none warms the engine's cache for the run's own prefixes. Their records: "
        "engine-warmup.jsonl; the report's notes say how many were sent and how they ended.")
    keep_records: int = Field(
        20_000, ge=1,
        description=("Completed records kept in memory (and as many others); beyond, they are counted, and "
                     "kept in requests.jsonl only."))

    @model_validator(mode="after")
    def _arrival_keys(self) -> LoadSpec:
        if self.arrival in ("poisson", "zigzag") and self.rate <= 0:
            raise ValueError(f"arrival = '{self.arrival}' needs rate > 0 (conversations per second)")
        for key, arrival in _ARRIVAL_KEYS.items():
            if getattr(self, key) not in (None, ()) and self.arrival != arrival:
                raise ValueError(f"{key} is a key of arrival = '{arrival}', not of arrival = '{self.arrival}'")
        if self.arrival == "series" and not self.rates:
            raise ValueError("arrival = 'series' needs rates: at least one step ([[load.rates]] seconds, rate)")
        if self.arrival == "series" and self.rates[-1].rate <= 0:
            raise ValueError("rates: the last step's rate goes on until the conversations run out, so it must be > 0")
        if self.arrival == "zigzag" and (self.rate_low or 0.0) > self.rate:
            raise ValueError(f"rate_low ({self.rate_low:g}) is above rate ({self.rate:g}), the zigzag's peak")
        return self


class WatchedEndpoint(Section):
    """Another process of the deployment to watch beside the target (a replica, a prefill or decode pool): its
    /health polled and its metrics scraped as the target's are, its death judged (rule endpoint_death)."""

    name: str = Field(description="Its name, as reports and metrics show it (decode-0).")
    health_url: str = Field("", description="Its health URL (http://127.0.0.1:8101/health); empty: not polled.")
    metrics_url: str = Field("", description="Its Prometheus metrics URL; empty: not scraped.")


class WatchSpec(Section):
    health_path: str = Field("/health", description="Where the target answers health checks; empty: not polled.")
    health_interval_s: float = Field(1.0, gt=0, description="Seconds between /health polls.")
    metrics_path: str = Field("/metrics", description="Prometheus metrics to scrape; empty: not scraped.")
    metrics_interval_s: float = Field(0.5, gt=0, description="Seconds between scrapes of the metrics.")
    engine_log: str = Field("", description="A log file of the engine's to scan for error signatures.")
    health_timeout_s: float = Field(
        5.0, gt=0, description="A /health answer slower than this is slow (rule health_latency); a poll is given "
        f"up as unreachable only after {HEALTH_GIVE_UP}x this with no answer at all.")
    liveness_timeout_s: float = Field(
        1.0, gt=0, description="The timeout of the liveness probe an orchestrator would run against the health "
        "path (Kubernetes' timeoutSeconds, 1 by default).")
    liveness_failures: int = Field(
        3, ge=1, description="Probes in a row that fail or answer slower than liveness_timeout_s before the "
        "orchestrator restarts the engine (Kubernetes' failureThreshold, 3 by default).")
    liveness_period_s: float = Field(
        10.0, gt=0, description="How often the orchestrator probes (Kubernetes' periodSeconds, 10 by default).")
    introspection_path: str = Field(
        "", description="An introspection endpoint to poll beside /health on a connection of its own (llama.cpp: "
        "/slots): one that stops answering while /health answers 200 is a wedged scheduler (rule "
        "introspection_unresponsive); auto: /slots where the target serves llama.cpp's, else none; empty: not polled "
        "(the default: polling /slots stalled a one-slot llama.cpp 0.3.17 under load).")
    introspection_timeout_s: float = Field(
        5.0, gt=0, description="How long a poll of introspection_path waits for an answer before it is given up.")
    memory_interval_s: float = Field(
        1.0, ge=0, description="Seconds between readings of the memory of an engine loadrepro starts (its process "
        "group's resident, anonymous and swapped memory, from /proc); a target at a URL is read at each metrics "
        "scrape instead, where it publishes process_resident_memory_bytes; 0: not read.")
    canary_interval_s: float = Field(
        0.0, ge=0, description="> 0: a salted one-token request this often, on its own connection and outside the "
        "workload's concurrency; its time to first token is kept as a series, and canaries that get nothing while "
        "/health answers 200 show an engine wedged while healthy.")
    endpoints: tuple[WatchedEndpoint, ...] = Field(
        (), description="More processes of the deployment to watch ([[watch.endpoints]]: name, health_url, "
        "metrics_url), polled at health_interval_s and metrics_interval_s.")


class SimSpec(Section):
    """The embedded simulated engine: the one definition of its settings.

    The same fields are the profile's [sim] keys, the `sim` command's flags and the arguments loadrepro starts the
    engine with. None means the scenario's default (sim/config.py); descriptions are the flags' help.
    """

    scenario: Literal["draft-pool", "page-index", "blocks-exhausted", "healthy", "prefix-corruption"] = Field(
        "draft-pool", description="Which seed failure the engine models.")
    policy: Literal["stock", "patched"] = Field("stock", description="stock: the defect; patched: the admission fix.")
    model: str | None = Field(None, min_length=1, description="Model id served at /v1/models.")
    block_size: int | None = Field(None, ge=1, description="Tokens per KV block.")
    primary_blocks: int | None = Field(None, ge=1, description="Blocks in the primary (prefix-reusing) pool.")
    draft_blocks: int | None = Field(None, ge=0, description="Blocks in the draft/indexer mirror pool (0: none).")
    max_model_len: int | None = Field(None, ge=1, description="Longest context accepted, in tokens.")
    beam_width: int | None = Field(None, ge=1, description="Beams per request (multiplies blocks).")
    kv_bytes_per_token: int | None = Field(None, ge=1, description="KV-cache bytes one token takes.")
    index_pool_bytes: int | None = Field(
        None, ge=0, description="Memory estimate the page-index table is sized from (0: no table).")
    prefill_tokens_per_s: float | None = Field(None, gt=0, description="Prefill speed, tokens per second.")
    step_s: float | None = Field(None, gt=0, description="Duration of one engine step (one decode token), seconds.")
    natural_output_tokens: int | None = Field(
        None, ge=1, description="Mean answer length when a request does not set ignore_eos.")
    death_status: Literal[400, 500, 503] | None = Field(
        None, description="HTTP status of requests after the engine died: 500, or 400 as TensorRT-LLM reports it.")
    death_mode: Literal["error-event", "cut"] | None = Field(
        None, description="How in-flight streams end when the engine dies.")
    reasoning_tokens: int | None = Field(
        None, ge=0, description="The first N tokens of every answer are reasoning, streamed before its content "
        "(chat: delta.reasoning; responses: reasoning_text deltas; messages: a thinking block).")
    leak_on_abort: bool | None = Field(
        None, description="The abort defect: with the stock policy a request whose client disconnects keeps its "
        "running slot and its KV blocks for good (a zombie); patched frees them.")
    race_probability: float | None = Field(
        None, ge=0, le=1, description="The race defect: with the stock policy the engine dies, on this share of its "
        "starts, at an admission the draw picks (a scheduler race that frees a request's blocks twice); patched "
        "never. A flaky failure, for repeated trials.")
    race_seed: int | None = Field(
        None, description="The race's draw: given, the same at every start; not given, drawn anew at each start "
        "(from the time it starts).")


class EngineSpec(Section):
    """The target's KV-cache numbers, for predictions; what is left out is discovered from the target."""

    layers: int | None = Field(None, ge=1, description="Transformer layers holding KV.")
    kv_heads: int | None = Field(None, ge=1, description="KV heads per layer.")
    head_dim: int | None = Field(None, ge=1, description="Head dimension.")
    kv_dtype: Literal["fp32", "fp16", "bf16", "fp8", "int8"] = Field(
        "fp16", description="KV-cache element type: fp32, fp16, bf16, fp8 or int8.")
    bytes_per_token: int | None = Field(
        None, ge=1, description="KV bytes per token, instead of layers, heads, dims and dtype.")
    tokens_per_block: int | None = Field(None, ge=1, description="Tokens per KV block.")
    pool_bytes: int | str | None = Field(None, description="The KV pool's size: 4194304, '4MiB', '60.51GiB'.")
    pool_blocks: int | None = Field(None, ge=1, description="The KV pool's size in blocks, instead of pool_bytes.")
    gpu_memory_bytes: int | str | None = Field(
        None, description="GPU memory, with free_fraction and weights_bytes, instead of pool_bytes.")
    free_fraction: float = Field(0.9, gt=0, le=1, description="Share of GPU memory for weights and KV.")
    weights_bytes: int | str = Field(0, description="The model weights' size.")
    max_seq_len: int | None = Field(None, ge=1, description="The engine's configured longest sequence.")
    max_batch: int = Field(1, ge=1, description="The engine's largest batch.")
    beam_width: int = Field(1, ge=1, description="Beams per request.")
    draft_bytes_per_token: int = Field(0, ge=0, description="Draft or indexer cache bytes per token (0: none).")
    draft_pool_bytes: int | str | None = Field(
        None,
        description="A separate draft pool's size (unset with draft bytes per token: the draft shares the pool).")
    index_pool_bytes: int | str | None = Field(
        None, description="The memory estimate a page-index table is sized from.")


class VerdictSpec(Section):
    allow_rejected: bool = Field(
        True, description="Requests refused cleanly at admission are information (false: a failure).")
    min_completed: float = Field(1.0, ge=0, le=1, description="Share of admitted requests that must complete.")
    require_post_health: bool = Field(True, description="/health must answer 200 right after the run.")
    min_cache_hit: float = Field(
        0.0, ge=0, le=1, description="> 0: later turns must find at least this share of their shared prefix cached.")
    max_prompt_error: float = Field(
        0.05, gt=0, description="Planned vs the target's usage.prompt_tokens beyond this share: a warning.")
    allow_truncated_prompts: bool = Field(
        False, description="Prompts the engine cut (to its context) and answered anyway are information (true), "
                           "not a failure (false: an answer to a cut prompt answers another request).")
    max_ttft_regression: float = Field(
        0.5, ge=0, description="compare/ab: the patched side's TTFT p50 may grow by this share at most.")
    max_throughput_regression: float = Field(
        0.2, ge=0, le=1, description="compare/ab: and its decode tokens/s may drop by this share at most.")
    window_s: float = Field(
        60.0, gt=0, description="Long runs are summarised, and judged, window by window of this many seconds.")
    max_ttft_growth: float = Field(
        1.0, ge=0, description="degradation: the last window's TTFT p95 over the first steady window's, as a share.")
    max_error_growth: float = Field(
        0.05, ge=0, le=1,
        description="degradation: the last window's error rate over the first steady window's, in points.")
    max_kv_leak: float = Field(
        0.05, gt=0, le=1, description="kv_leak: how much KV usage at quiet moments may creep up in all.")
    max_health_latency_s: float = Field(
        0.0, ge=0, description="> 0: a /health slower than this fails the run (else slowness is a warning).")
    min_draft_acceptance: float = Field(
        0.0, ge=0, le=1, description="spec_acceptance_collapse: > 0: the share of drafted tokens the engine must "
        "accept over the run (speculative decoding); 0: only a collapse from the early requests to the late is "
        "judged.")
    max_memory_growth_mb: float = Field(
        0.0, ge=0, description="engine_memory_growth: > 0: the MiB an engine loadrepro started may grow, from the "
        "end of the warm-up to its idle end, steadily with the requests it served, before the run fails; 0: growth "
        "over 64 MiB is a warning (a prompt cache in RAM, llama.cpp's by default, grows so up to its limit).")


class SloSpec(Section):
    """A service level: a request meets it when every limit set holds; a failed request never does."""

    ttft_ms: float = Field(0.0, ge=0, description="> 0: time to first token at most this many milliseconds.")
    itl_ms: float = Field(0.0, ge=0, description="> 0: a request's mean inter-token latency at most this.")
    e2e_ms: float = Field(0.0, ge=0, description="> 0: end to end (sent to last token) at most this.")
    min_attainment: float = Field(
        0.0, ge=0, le=1, description="> 0: rule slo fails the run when fewer than this share of requests met it.")
    include_ramp_up: bool = Field(
        False, description="Judge every request (true), or only those sent from when the requests in flight first "
                           "reached their steady level (false: the ramp-up's cold start is not the service level).")

    @property
    def limits(self) -> dict[str, float]:
        """The limits set, by name (ttft, itl, e2e)."""
        return {name: limit for name, limit in (("ttft", self.ttft_ms), ("itl", self.itl_ms), ("e2e", self.e2e_ms))
                if limit > 0}


class VerifySpec(Section):
    """Answers checked under load: each checked request is sent again alone on the idle engine after the load, and
    its answer under load is compared with that reference, token by token."""

    outputs: Literal["off", "sample", "all"] = Field(
        "off", description="off; sample: `sample` completed requests are checked; all: every completed request. "
        "Requests then go out with temperature 0, a fixed seed and the top 2 logprobs per position.")
    sample: int = Field(16, ge=1, description="outputs = sample: how many completed requests are checked.")
    compare_tokens: int = Field(
        64, ge=1, le=4096, description="Output positions compared (and kept per request, with their logprobs).")
    min_margin: float = Field(
        1.0, gt=0, description="Nats. Where the answers first differ, the reference's token led its runner-up by "
        "at least this: a wrong answer (rule wrong_output); by less: a near-tie, which batching may flip, reported "
        "only.")
    top_logprobs: int = Field(2, ge=2, le=20, description="Logprobs asked for per position (the chosen token's "
                              "runner-up must be among them).")


class SignatureSpec(Section):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    name: str = Field(description="The signature's name, as reports show it.")
    pattern: str = Field(description="A regular expression matched against error texts and log lines.")
    class_: Literal["F", "P", "T", "R"] = Field(
        alias="class", description="F fatal, P propagation, T temporary, R recoverable.")
    throttling: bool = Field(
        False, description="The text means 'busy, retry later': such a request is retried, then `throttled`.")


OUTAGES = frozenset({"kill", "restart", "pause"})  # faults that stop the engine: requests failing then are theirs
WIPES = frozenset({"kill", "restart"})  # faults after which the engine starts with an empty prefix cache


class ChaosEvent(Section):
    """A fault loadrepro causes on purpose while the load runs, for soaks; the engine must be back to its state
    before it within `recover_within_s` (rule no_recovery)."""

    at_s: float = Field(gt=0, description="Seconds into the load.")
    action: ChaosAction = Field(
        description="kill: SIGKILL the engine loadrepro started and start it again after `duration_s`; restart: "
        "SIGTERM it, wait for its exit, start it again; pause: SIGSTOP its process group for `duration_s`, then "
        "SIGCONT; abort_burst: cancel `count` requests in flight at once, answers under way first, the latest to "
        "begin first (the client disconnects mid-stream: the engine must free what they held, rule "
        "zombie_requests); oversize: send one request just beyond what the engine can ever hold (its KV pool or "
        "longest sequence, from its limits), which it must refuse cleanly without holding up the requests after "
        "it; malformed: send `count` requests of each `kind` no client should send, each on a connection of its "
        "own, which it must refuse with a 4xx and keep serving (rule bad_input_crash). kill, restart and pause "
        "need an engine loadrepro starts (not --base-url).")
    duration_s: float = Field(5.0, ge=0, description="kill: seconds before the engine is started again; pause: "
                              "seconds it stays stopped.")
    count: int = Field(8, ge=1, description="abort_burst: requests cancelled at once; malformed: requests of each "
                       "kind (by default 8 of each: 40 for all).")
    kind: MalformedKind | Literal["all"] = Field(
        "all", description="malformed: invalid_utf8 (bytes that are not UTF-8), bad_json (JSON cut short), "
        "wrong_types (fields of the wrong types), huge_body (a 4 MiB prompt), negative_max_tokens, or all of those "
        "in turn; or bad_grammar (vLLM's structured_outputs with a grammar that defines its root rule twice, which "
        "the engine must refuse however an earlier structured request set up its grammar backend; never part of "
        "all, since other engines ignore the field).")
    recover_within_s: float = Field(60.0, gt=0, description="The engine must answer /health 200, serve first tokens "
                                    "within [verdict] max_ttft_growth of before, and run no more requests than "
                                    "loadrepro has in flight, within this many seconds of the fault.")

    @property
    def outage(self) -> bool:
        """Whether the engine is stopped or restarted: requests failing meanwhile are the fault's."""
        return self.action in OUTAGES


class TargetSpec(Section):
    """Replicas of the target: the same model served by several engines, the load spread over them by loadrepro as
    a client-side list spreads it. Each is watched and judged on its own (rule replica_death)."""

    replicas: tuple[str, ...] = Field((), description=(
        "More replicas' OpenAI-compatible URLs beside the target's (--base-url given more than once fills it): "
        "requests are spread over all of them; each one's /health and metrics are watched at the target's paths."))
    routing: Routing = Field("round_robin", description=(
        "How requests are spread over the replicas: round_robin (each request to the next replica) or session "
        "(every turn of a conversation, or of a trace's session, on one replica: its prefix stays cached there)."))
    reset_cache: bool = Field(False, description=(
        "Empty the prefix cache of the target and of every replica beside it before the load (vLLM's "
        "/reset_prefix_cache, SGLang's /flush_cache, llama.cpp's slots erased), so that a run meets no cache an "
        "earlier one warmed; a target or replica that offers no reset is a usage error."))


class ChaosSpec(Section):
    events: tuple[ChaosEvent, ...] = Field((), description="The faults, each at its time ([[chaos.events]]).")


class PhaseSpec(Section):
    """A phase of a battery of one's own ([[phases]]), read by `loadrepro stress` alone: a built-in phase with
    overrides, or a profile run as a phase."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    name: str = Field(min_length=1, description="The phase's name, as the battery's report shows it; without "
                      "`profile`, the built-in phase of that name (steady, burst, ...).")
    profile: str = Field("", description="A profile to run as this phase: a built-in profile's name or a file "
                         "(relative to this profile's folder); empty: the built-in phase `name`.")
    overrides: tuple[str, ...] = Field((), alias="set", description="KEY=VALUE overrides (TOML values, as --set) "
                                       "of the phase's profile.")


class Profile(Section):
    name: str = Field(description="The profile's name.")
    description: str = Field("", description="What the profile reproduces, in a sentence.")
    api: Api = Field("chat", description="The generation API the load uses.")
    model: str = Field("", description="The model to ask for (empty: the first the target lists).")
    workload: WorkloadSpec = Field(WorkloadSpec(), description="The traffic.")
    load: LoadSpec = Field(LoadSpec(), description="How it is sent.")
    watch: WatchSpec = Field(WatchSpec(), description="How the target is watched.")
    sim: SimSpec = Field(SimSpec(), description="The simulated engine, when it is the target.")
    engine: EngineSpec = Field(EngineSpec(), description="The target's KV-cache numbers, for predictions.")
    verdict: VerdictSpec = Field(VerdictSpec(), description="What passes.")
    verify: VerifySpec = Field(VerifySpec(), description="Answers checked under load against the same request "
                               "alone.")
    chaos: ChaosSpec = Field(ChaosSpec(), description="Faults caused on purpose during the load.")
    target: TargetSpec = Field(TargetSpec(), description="Replicas of the target and how the load is spread over "
                               "them ([target]).")
    slo: SloSpec = Field(SloSpec(), description="The service level each request is judged against ([slo]).")
    signatures: tuple[SignatureSpec, ...] = Field(
        (), description="Error texts of the profile's own, beside the built-in catalog.")
    phases: tuple[PhaseSpec, ...] = Field(
        (), description="A battery of one's own for `loadrepro stress` ([[phases]]: name, profile, set), run instead "
        "of the built-in phases, in this order; `loadrepro run` ignores it.")
