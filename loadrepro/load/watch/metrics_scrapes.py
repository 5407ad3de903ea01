"""Scrapes the target's Prometheus endpoint and keeps the series that describe KV pressure and admission, mapped
once, at scrape time, to canonical series that rules, reports and plots read whatever the engine: vLLM (old and new
names), SGLang, TensorRT-LLM's Prometheus path, llama.cpp and the simulated engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from loadrepro.load.pause import woken
from loadrepro.load.transport import NoAnswer, Transport
from loadrepro.records import (
    CACHE_HITS,
    CACHE_QUERIES,
    ENGINE_FINISHED,
    ENGINE_RSS,
    KV_USAGE,
    POOL_USAGE,
    PREEMPTIONS,
    RUNNING,
    SPEC_ACCEPTED,
    SPEC_DRAFTED,
    WAITING,
    MetricsSample,
    Note,
    NoteSource,
)

# Families (prefixes) of vLLM, SGLang, TensorRT-LLM's Prometheus path, llama.cpp and the simulated engine.
KEPT = (
    "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:num_requests_running",
    "vllm:num_requests_waiting", "vllm:num_preemptions", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
    "vllm:admission_rejections", "vllm:cache_config_info",
    "sglang:token_usage", "sglang:num_used_tokens", "sglang:num_running_reqs", "sglang:num_queue_reqs",
    "sglang:cache_hit_rate", "sglang:num_retracted_reqs",
    "trtllm_kv_cache_utilization", "kv_cache_hit_rate", "num_requests_running", "num_requests_waiting",
    "llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:n_tokens_max",
    "loadrepro_sim:", "process_resident_memory_bytes", "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens", "vllm:request_success",
)
_DROPPED_LABELS = {"model_name", "engine_type"}  # "engine" stays: data-parallel engines add up

CANONICAL = {
    "vllm:kv_cache_usage_perc": KV_USAGE, "vllm:gpu_cache_usage_perc": KV_USAGE,  # new and old names, 0..1
    "vllm:num_requests_running": RUNNING, "vllm:num_requests_waiting": WAITING,
    "vllm:num_preemptions_total": PREEMPTIONS, "vllm:num_preemptions": PREEMPTIONS,
    "vllm:prefix_cache_hits_total": CACHE_HITS, "vllm:prefix_cache_queries_total": CACHE_QUERIES,
    "sglang:token_usage": KV_USAGE, "sglang:num_running_reqs": RUNNING, "sglang:num_queue_reqs": WAITING,
    "sglang:num_retracted_reqs": PREEMPTIONS,  # SGLang retracts requests where vLLM preempts them
    "trtllm_kv_cache_utilization": KV_USAGE, "num_requests_running": RUNNING, "num_requests_waiting": WAITING,
    "llamacpp:requests_processing": RUNNING, "llamacpp:requests_deferred": WAITING,
    "process_resident_memory_bytes": ENGINE_RSS,  # prometheus_client's process collector (vLLM's API server)
    "vllm:request_success_total": ENGINE_FINISHED,  # by finished_reason, added up: 0 is an engine that served none
    "vllm:spec_decode_num_draft_tokens_total": SPEC_DRAFTED,
    "vllm:spec_decode_num_accepted_tokens_total": SPEC_ACCEPTED,
}
_FULLEST = {KV_USAGE}  # several label sets (ranks, data-parallel engines): the fullest pool; counts add up


def canonical(raw: dict[str, float]) -> dict[str, float]:
    """`name{labels}` -> value, as `parse_kept` gives them, to the canonical series."""
    series: dict[str, float] = {}
    used: dict[str, float] = {}
    for key, value in raw.items():
        name, _, labels = key.partition("{")
        if name == "loadrepro_sim:kv_blocks_used":
            used[labels] = value
            continue
        target = CANONICAL.get(name)
        if target is None:
            continue
        if target in series:
            series[target] = max(series[target], value) if target in _FULLEST else series[target] + value
        else:
            series[target] = value
    for labels, value in used.items():
        total = raw.get("loadrepro_sim:kv_blocks_total{" + labels)
        pool = labels[labels.find('"') + 1:labels.rfind('"')]
        if total:
            series[POOL_USAGE + pool] = value / total
    return series
SCRAPE_TIMEOUT_S = 5.0


def _kept_lines(text: str) -> str:
    """Only the lines of the kept families: the parser is pure Python, and an engine's full exposition (vLLM's
    histograms and info labels) costs it most of a second, all of it on the event loop the streams share."""
    kept = []
    for line in text.splitlines():
        if line.startswith("#"):
            words = line.split(maxsplit=3)
            if len(words) >= 3 and words[2].startswith(KEPT):
                kept.append(line)
        elif line.startswith(KEPT):
            kept.append(line)
    return "\n".join(kept) + "\n"


def parse_kept(text: str) -> dict[str, float]:
    """`name{label="value",...}` -> value for the kept families; raises ValueError on non-Prometheus text."""
    values: dict[str, float] = {}
    if text.lstrip().startswith(("[", "{")):
        raise ValueError("JSON, not Prometheus text")
    for family in text_string_to_metric_families(_kept_lines(text)):
        if not family.name.startswith(KEPT):
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()) if k not in _DROPPED_LABELS)
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


# What a target answers at a path it does not serve: metrics are not published there (llama.cpp without --metrics
# answers 501). Any other answer that is not 200 (a 503 while a restarted engine loads its model, a proxy's 502) is
# an outage of /metrics, and so is any answer at all once it has published metrics.
NOT_PUBLISHED = frozenset({401, 403, 404, 405, 410, 501})


class MetricsWatcher:
    def __init__(self, http: Transport, path: str, interval_s: float,
                 on_sample: Callable[[MetricsSample | Note], None],
                 clock: Callable[[], int] = time.perf_counter_ns, in_flight: Callable[[], int] | None = None) -> None:
        """`in_flight`: loadrepro's requests in flight at the target, asked as each scrape is sent (the sample's
        in_flight then; the runner takes the larger of it and those in flight when the answer came)."""
        self._http, self._path, self._interval_s = http, path, interval_s
        self._on_sample, self._clock, self._in_flight = on_sample, clock, in_flight
        self.off = False  # the target publishes no metrics at the path: nothing more is scraped
        self._published = False  # it answered Prometheus text at least once
        self._down_ns: int | None = None  # since when /metrics answered otherwise (an outage of it), noted once
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """Scrape now rather than at the next interval (a request milestone: memory read from /metrics)."""
        self._wake.set()

    async def scrape(self) -> bool:
        """One scrape; False once the target proved to publish no metrics at the path (noted once, and not asked
        again). A refused or unanswered scrape, or one answered otherwise while the target publishes metrics or
        may yet (a 503 while a restarted engine loads), is an outage of /metrics: scraped on, and watched again
        once it answers."""
        if self.off:
            return False
        started = self._clock()
        flight = self._in_flight() if self._in_flight is not None else None
        response = await self._http.get(self._path, SCRAPE_TIMEOUT_S)  # a busy engine answers late
        if isinstance(response, NoAnswer):
            return True  # the engine may be busy or gone; /health tells which
        if response.status != 200:
            if not self._published and response.status in NOT_PUBLISHED:
                return self._unusable(f"{self._path} answered HTTP {response.status}; metrics are not watched")
            return self._down(f"answered HTTP {response.status}")
        try:
            values = parse_kept(response.text)
        except (ValueError, TypeError, IndexError) as exc:
            if not self._published:
                return self._unusable(f"{self._path} is not Prometheus text ({exc}); metrics are not watched")
            return self._down(f"answered what is not Prometheus text ({exc})")
        self._published = True
        if self._down_ns is not None:
            self._note(f"{self._path} answered again after {(started - self._down_ns) / 1e9:.1f} s; metrics are "
                       "watched again")
            self._down_ns = None
        self._on_sample(MetricsSample(started, canonical(values), flight))
        return True

    def _down(self, what: str) -> bool:
        if self._down_ns is None:
            self._down_ns = self._clock()
            self._note(f"{self._path} {what}; scraped on, and watched again once it answers")
        return True

    def _unusable(self, text: str) -> bool:
        self.off = True
        self._note(text)
        return False

    def _note(self, text: str) -> None:
        self._on_sample(Note(self._clock(), NoteSource.METRICS, text))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._wake.clear()
            if not await self.scrape():
                return
            await woken(stop, self._wake, self._interval_s)


# How many requests wait or run says nothing of progress: a deadlocked engine keeps those steady, or not.
_NOT_PROGRESS = (RUNNING, WAITING)


def progressed(before: dict[str, float], after: dict[str, float]) -> bool:
    """Whether the engine's metrics show work between two scrapes (KV usage, cache counters, preemptions...)."""
    return any(before.get(k) != v for k, v in after.items() if k not in _NOT_PROGRESS)
