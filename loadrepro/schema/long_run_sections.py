"""The sections of report.json that long runs and deployments add: windows, the chaos table of faults on
purpose, trials, liveness, the service level, replicas and watched endpoints."""

from __future__ import annotations

from pydantic import Field, field_validator

from loadrepro.schema.report_kinds import Model, VerdictStatus


class WatchedEndpointInfo(Model):
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


class EndpointHealth(Model):
    """A replica's /health over the run."""

    pre: int | str | None = Field(description="Its first poll's status (a status code, or 'unreachable').")
    post: int | str | None = Field(description="Its last poll's status (the target's: the poll after the load).")
    slow: int = Field(description="Polls slower than [watch] health_timeout_s.")


class EndpointTtft(Model):
    p50: float | None = Field(None, description="The median time to first token, ms.")
    p95: float | None = Field(None, description="Its 95th percentile, ms.")


class EndpointInfo(Model):
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


class ChaosRow(Model):
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


class TrialRow(Model):
    index: int = Field(description="The trial's number, from 1.")
    seed: int = Field(description="Its workload seed.")
    verdict: VerdictStatus = Field(description="pass or fail.")
    failing_rules: list[str] = Field(description="The rules whose failures failed it.")
    first_failure_s: float | None = Field(description="When its first request failed, seconds into its load.")
    run_dir: str = Field(description="Its run directory, with its own reports.")


class TrialsInfo(Model):
    n: int = Field(description="Trials run.")
    planned: int = Field(description="Trials asked for (--trials); fewer ran when the answer was decided early.")
    failed: int = Field(description="Trials that failed.")
    failure_rate: float = Field(description="failed / n.")
    ci95: list[float] = Field(description="Exact (Clopper-Pearson) 95% interval of the failure rate, [low, high].")
    signatures: dict[str, int] = Field(description="Each failing rule, and in how many trials it failed.")
    first_failure_s: list[float] = Field(description="Each failing trial's first failure, seconds into its load.")
    vary_seed: bool = Field(description="Whether each trial had its own seed (seed, seed+1, ...).")
    trials: list[TrialRow] = Field(description="Each trial, in the order run.")


class Liveness(Model):
    """What a liveness probe with the deployment's settings ([watch] liveness_*) would have done to the engine."""

    timeout_s: float = Field(description="The probe's timeout.")
    period_s: float = Field(description="How often it probes.")
    failures: int = Field(description="Failed probes in a row that restart the engine.")
    would_restart_at_s: float | None = Field(description="When it would have restarted the engine; null: never.")


class WindowRow(Model):
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
    memory_mb: float | None = Field(None, description="The engine's resident memory at the last reading in it, MiB "
                                    "(engine_memory; null: not read).")
    ended: int = Field(0, description="Requests that ended in it (sent in it or before), to the second.")
    in_flight_end: int = Field(0, description="Requests loadrepro had in flight when it ended, to the second.")
    due: int = Field(0, description="Requests due in it (loadrepro's arrivals, sent then, later or never).")
    unsent_end: int = Field(0, description="Requests due that were still waiting in loadrepro to be sent when it "
                            "ended (its concurrency full), to the second.")
    slo_attainment: float | None = Field(None, description="[slo]: the share of the requests sent in it (to the "
                                         "second) that met the service level (null: none set, or none judged).")


class SloMissed(Model):
    ttft: int = Field(description="Requests whose time to first token was over [slo] ttft_ms.")
    itl: int = Field(description="Requests whose mean inter-token latency was over [slo] itl_ms.")
    e2e: int = Field(description="Requests whose end-to-end time was over [slo] e2e_ms.")
    failed: int = Field(description="Requests that failed (a failed request never meets the service level).")


class SloInfo(Model):
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
