"""What the plots show, as arrays on one time axis (seconds from the run's start). Pure.

Built from a RunResult in memory, or from a run directory's requests.jsonl and samples.jsonl (so `compare` can
draw runs it did not make).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ddsketch import DDSketch

from loadrepro.records import (
    FAILED,
    KV_USAGE,
    RUNNING,
    WAITING,
    CanarySample,
    HealthSample,
    LogMatch,
    MemorySample,
    MetricsSample,
    RequestRecord,
    RunResult,
    Tally,
    Verification,
    Watched,
    read_run_files,
    wrong_answers,
)
from loadrepro.records.counts import PerSecond
from loadrepro.schema.long_run_sections import WindowRow
from loadrepro.schema.run_report import RunReport
from loadrepro.workload.summary import TreeShape


@dataclass(frozen=True, slots=True)
class Lane:
    conversation: int
    turn: int
    start_s: float
    end_s: float
    outcome: str
    replica: int = 0  # the replica it went to (0: the target)
    request: int = 0  # its id, as requests.jsonl and the report's tables name it
    detail: str = ""  # what it got, when that was not an answer (the first 200 characters)


@dataclass(frozen=True, slots=True)
class Timeline:
    label: str
    duration_s: float
    in_flight_t: np.ndarray  # step series of requests in flight
    in_flight_n: np.ndarray
    ends: dict[str, np.ndarray]  # outcome -> end times (of the records kept in memory)
    end_counts: dict[str, int]  # outcome -> how many requests ended so (all of them, kept or not)
    health_t: np.ndarray
    health_ok: np.ndarray  # 1 where /health answered 200
    health_status: tuple[str, ...]
    health_latency_s: np.ndarray  # how long each poll took to answer
    canary_t: np.ndarray  # when each canary was sent
    canary_ttft_s: np.ndarray  # its time to its token; NaN when it got none
    kv_t: np.ndarray
    kv_usage: np.ndarray  # 0..1, the engine's primary KV usage
    waiting_t: np.ndarray  # each series on its own times: an engine may publish some and not others
    waiting: np.ndarray
    running_t: np.ndarray
    running: np.ndarray
    lanes: tuple[Lane, ...]
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    first_failure_s: float | None
    first_fatal_s: float | None
    first_fatal_text: str
    health_path: str = "/health"  # the path that was polled ([watch] health_path)
    windows: tuple[WindowRow, ...] = ()  # a long run's windows, as its report has them
    first_wrong_s: float | None = None  # when the first request whose answer was wrong ([verify]) ended
    dropped: int = 0  # requests not kept in memory, so not in `lanes` (`ttft_ms` and `e2e_ms` then from sketches)
    # how many requests each value of ttft_ms and e2e_ms stands for: 1, or for a run that dropped records, values at
    # evenly spaced quantiles of the run's sketches, each standing for its share of every request
    ttft_weight: float = 1.0
    e2e_weight: float = 1.0
    chaos: tuple[tuple[float, float, str], ...] = ()  # each fault on purpose: when, when back (or given up), what
    endpoints: tuple[EndpointSeries, ...] = ()  # the other processes watched ([[watch.endpoints]], replicas)
    replicas: int = 1  # how many replicas the load was spread over ([target] replicas; 1: the target alone)
    memory_t: np.ndarray = dataclasses.field(default_factory=lambda: np.array([]))  # the started engine's readings
    memory_mib: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 3)))  # resident, anon, swap
    trees: tuple[tuple[int, ...], ...] = ()  # agent trees: each one's conversations, its agent's first


@dataclass(frozen=True, slots=True)
class EndpointSeries:
    """A watched endpoint's /health and metrics over the run, in seconds since the load started."""

    name: str
    health_t: np.ndarray
    health_ok: np.ndarray  # 1 where /health answered 200
    kv_t: np.ndarray
    kv_usage: np.ndarray
    waiting_t: np.ndarray
    waiting: np.ndarray


_QUANTILES = 400  # points a sketch is drawn with (within the sketch's 1% relative accuracy)


def _from_sketch(sketch: DDSketch) -> tuple[np.ndarray, float]:
    """A latency sketch as values at evenly spaced quantiles, and how many requests each stands for."""
    if not sketch.count:
        return np.array([]), 1.0
    quantiles = (np.arange(_QUANTILES) + 0.5) / _QUANTILES
    return np.array([sketch.get_quantile_value(float(q)) for q in quantiles]), sketch.count / _QUANTILES


def _series(metrics: list[MetricsSample], start_ns: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    found = [(sample.t_ns, sample.values[name]) for sample in metrics if name in sample.values]
    return np.array([(t - start_ns) / 1e9 for t, _ in found]), np.array([v for _, v in found])


MAX_STEPS = 2000  # the in-flight series is drawn from at most this many steps


def _peaks(t: np.ndarray, n: np.ndarray, duration_s: float) -> tuple[np.ndarray, np.ndarray]:
    """A step series of many changes as the peak of each of MAX_STEPS equal stretches of the run (a soak's
    in-flight count changes twice per request: hundreds of thousands of steps nobody can see)."""
    if len(t) <= MAX_STEPS:
        return t, n
    buckets = np.minimum((t / duration_s * MAX_STEPS).astype(int), MAX_STEPS - 1)
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    return buckets[starts] * duration_s / MAX_STEPS, np.maximum.reduceat(n, starts)


def _in_flight(sent: list[RequestRecord], start_ns: int, end_ns: int,
               flow: PerSecond | None) -> tuple[np.ndarray, np.ndarray]:
    """Requests in flight as a step series: from each request's start and end, or, when not every record was
    kept, from the run's counts per second (the level at the end of each second)."""
    if flow is not None:
        times, counts = flow.in_flight()
        return _peaks(np.array(times), np.array(counts), max((end_ns - start_ns) / 1e9, 1e-3))
    events = sorted([((r.sent_ns - start_ns) / 1e9, 1) for r in sent if r.sent_ns is not None]
                    + [((r.end_ns - start_ns) / 1e9, -1) for r in sent])
    in_flight_t = np.array([0.0] + [t for t, _ in events])
    in_flight_n = np.concatenate([[0], np.cumsum([d for _, d in events])]) if events else np.array([0])
    return _peaks(in_flight_t, in_flight_n, max((end_ns - start_ns) / 1e9, 1e-3))


def build_timeline(label: str, start_ns: int, end_ns: int, records: list[RequestRecord],
                   health: list[HealthSample], metrics: list[MetricsSample], matches: list[LogMatch],
                   canaries: list[CanarySample] | None = None, health_path: str = "/health",
                   totals: Tally | None = None, memory: list[MemorySample] | None = None) -> Timeline:
    """`totals`: the run's tally when not every record was kept in `records`; in flight and the count of each
    outcome then come from it."""
    def s(t_ns: int) -> float:
        return (t_ns - start_ns) / 1e9

    sent = [r for r in records if r.sent_ns is not None]
    in_flight_t, in_flight_n = _in_flight(sent, start_ns, end_ns, totals.per_second if totals else None)
    ends: dict[str, list[float]] = {}
    for r in records:
        ends.setdefault(r.outcome.value, []).append(s(r.end_ns))
    end_counts = dict(totals.by_outcome) if totals else {k: len(v) for k, v in ends.items()}
    kv_t, kv = _series(metrics, start_ns, KV_USAGE)
    wait_t, waiting = _series(metrics, start_ns, WAITING)
    running_t, running = _series(metrics, start_ns, RUNNING)
    failures = [s(r.end_ns) for r in records if r.outcome in FAILED]
    fatal = [m for m in matches if m.klass == "F"]
    lanes = tuple(Lane(r.conversation, r.turn, s(at), s(r.end_ns), r.outcome.value, r.replica, r.id,
                       (r.detail or "")[:200]) for r in sent if (at := r.sent_ns) is not None)
    ttft, ttft_weight = _from_sketch(totals.ttft_ms) if totals else \
        (np.array([r.ttft_ms for r in sent if r.ttft_ms is not None]), 1.0)
    e2e, e2e_weight = _from_sketch(totals.e2e_ms) if totals else (np.array([r.e2e_ms for r in sent]), 1.0)
    return Timeline(
        label=label, duration_s=max(s(end_ns), 1e-3), in_flight_t=in_flight_t, in_flight_n=in_flight_n,
        ends={k: np.array(v) for k, v in sorted(ends.items())}, end_counts=end_counts,
        health_t=np.array([s(h.t_ns) for h in health]), health_ok=np.array([h.healthy for h in health], dtype=int),
        health_status=tuple(str(h.status) for h in health),
        health_latency_s=np.array([h.latency_ns / 1e9 for h in health]),
        canary_t=np.array([s(c.t_ns) for c in canaries or ()]),
        canary_ttft_s=np.array([c.ttft_ns / 1e9 if c.ttft_ns is not None else np.nan for c in canaries or ()]),
        kv_t=kv_t, kv_usage=kv, waiting_t=wait_t, waiting=waiting, running_t=running_t, running=running,
        lanes=lanes,
        ttft_ms=ttft, e2e_ms=e2e, ttft_weight=ttft_weight, e2e_weight=e2e_weight,
        dropped=totals.dropped if totals else 0,
        first_failure_s=min(failures) if failures else None,
        first_fatal_s=s(min(m.t_ns for m in fatal)) if fatal else None,
        first_fatal_text=fatal[0].line if fatal else "", health_path=health_path,
        memory_t=np.array([s(m.t_ns) for m in memory or ()]),
        memory_mib=np.array([(m.rss_bytes, np.nan if m.anon_bytes is None else m.anon_bytes,
                              np.nan if m.swap_bytes is None else m.swap_bytes) for m in memory or ()],
                            dtype=float).reshape(-1, 3) / 2**20)


def _first_wrong_s(records: list[RequestRecord], wrong: set[int], start_ns: int) -> float | None:
    ends = [r.end_ns for r in records if r.id in wrong]
    return (min(ends) - start_ns) / 1e9 if ends else None


def timeline_of(result: RunResult, answers: Verification | None = None,
                trees: tuple[TreeShape, ...] = ()) -> Timeline:
    """The run's timeline, marking when the first answer [verify] found wrong (`answers`) ended, with its workload's
    agent trees."""
    health = list(result.health) + ([result.post_health] if result.post_health else [])
    dropped = result.tally is not None and result.tally.dropped > 0
    timeline = build_timeline(result.label, result.start_ns, result.end_ns, list(result.records), health,
                              list(result.metrics), list(result.log_matches), list(result.canaries),
                              result.watch.health_path, result.tally if dropped else None, list(result.memory))
    wrong = {c.request for c in wrong_answers(answers.checks)} if answers else set()
    endpoints = tuple(_endpoint(w, result.start_ns) for w in (*result.watched, *result.replicas))
    return dataclasses.replace(timeline, first_wrong_s=_first_wrong_s(list(result.records), wrong, result.start_ns),
                               endpoints=endpoints, replicas=1 + len(result.replicas),
                               trees=tuple(t.conversations for t in trees))


def _endpoint(w: Watched, start_ns: int) -> EndpointSeries:
    kv_t, kv = _series(list(w.metrics), start_ns, KV_USAGE)
    waiting_t, waiting = _series(list(w.metrics), start_ns, WAITING)
    return EndpointSeries(w.name, np.array([(s.t_ns - start_ns) / 1e9 for s in w.health]),
                          np.array([1 if s.healthy else 0 for s in w.health]), kv_t, kv, waiting_t, waiting)


def for_report(timeline: Timeline, report: RunReport) -> Timeline:
    """The timeline with what its run's report adds: its windows, the health path it polled, its faults on
    purpose (each shaded until it recovered, or for all of recover_within_s when it did not)."""
    chaos = tuple((c.at_s, c.done_s + (c.recovery_s if c.recovered and c.recovery_s else c.recover_within_s),
                   c.action) for c in report.chaos if c.recovered is not None)
    return dataclasses.replace(timeline, windows=tuple(report.windows), health_path=report.health.path, chaos=chaos,
                               replicas=max(1, len(report.endpoints)))


def timeline_from_run_dir(run_dir: Path, report: RunReport) -> Timeline | None:
    """Rebuild a timeline from the files a run left (and its report); None when they are missing."""
    if not (run_dir / "requests.jsonl").exists() or not (run_dir / "samples.jsonl").exists():
        return None
    files = read_run_files(run_dir)
    start = files.start_ns
    if start is None:
        return None
    end, records = start + int(report.duration_s * 1e9), list(files.records)
    timeline = build_timeline(report.label, start, end, records, list(files.health), list(files.metrics),
                              list(files.matches), list(files.canaries), memory=list(files.memory))
    wrong = {w.request for w in report.outputs.worst} if report.outputs else set()
    return for_report(dataclasses.replace(timeline, first_wrong_s=_first_wrong_s(records, wrong, start)), report)
