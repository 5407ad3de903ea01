"""The simulated engine's /metrics: vLLM's metric names plus per-pool block gauges of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from loadrepro.sim.steps import SchedulerStats


class _SimCollector:
    def __init__(self, stats: Callable[[], SchedulerStats], model: str) -> None:
        self._stats = stats
        self._labels = {"engine": "0", "model_name": model}

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=list(self._labels))
        family.add_metric(list(self._labels.values()), value)
        return family

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=list(self._labels))
        family.add_metric(list(self._labels.values()), value)
        return family

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                          s.primary_used / s.primary_total)
        yield self._gauge("vllm:num_requests_running", "Number of requests in model execution batches.", s.running)
        yield self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting)
        yield self._counter("vllm:num_preemptions", "Cumulative number of preemptions.", s.preemptions)
        yield self._counter("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", s.prefix_queries)
        yield self._counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", s.prefix_hits)
        yield self._counter("loadrepro_sim:requests_rejected", "Requests refused at admission.", s.rejected)
        yield self._gauge("loadrepro_sim:engine_dead", "1 once the scripted engine failure happened.", int(s.dead))
        pools = [("primary", s.primary_total, s.primary_used)]
        if s.draft_total:
            pools.append(("draft", s.draft_total, s.draft_used))
        total = GaugeMetricFamily("loadrepro_sim:kv_blocks_total", "Blocks in a KV pool.", labels=["pool"])
        used = GaugeMetricFamily("loadrepro_sim:kv_blocks_used", "Blocks owned by requests.", labels=["pool"])
        for pool, n_total, n_used in pools:
            total.add_metric([pool], n_total)
            used.add_metric([pool], n_used)
        yield total
        yield used
        cached = GaugeMetricFamily("loadrepro_sim:kv_blocks_cached_free",
                                   "Unowned blocks still holding a reusable prefix.", labels=["pool"])
        cached.add_metric(["primary"], s.primary_cached_free)
        yield cached


def metrics_registry(stats: Callable[[], SchedulerStats], model: str) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SimCollector(stats, model))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
