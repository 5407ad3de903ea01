"""The shapes of an open load ([load] arrival other than closed): when each conversation starts, in seconds after
the load began, one offset after another without end (a run takes one per conversation, a soak as many as its
duration lets it), drawn from the run's seed so that a run is reproducible; how each shape divides over worker
processes; and the shape in words.

- poisson: arrivals at `rate`, exponential gaps;
- bursts: `burst_size` at once every `burst_every_s`, the first after `idle_s`;
- series: Poisson arrivals at each step's rate for its seconds, in turn, the last step's rate on after it (a
  Poisson process is memoryless, so each step starts afresh at its start);
- zigzag: Poisson arrivals under a rate that goes from `rate_low` up to `rate` and back every `period_s`, drawn by
  thinning (candidates at the peak rate, each kept with probability rate(t) / peak: Lewis and Shedler).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadrepro.config.profile import BURST_EVERY_S, BURST_SIZE, PERIOD_S, LoadSpec

POISSON_STREAM = 9  # the SeedSequence stream of arrival times (others: load/arrivals.py)
_CHUNK = 256  # gaps drawn at once: a soak's offsets come as they are needed, not a million ahead


@dataclass(frozen=True, slots=True)
class Bursts:
    size: int
    every_s: float
    idle_s: float


def bursts(load: LoadSpec) -> Bursts:
    """arrival = 'bursts' with the defaults of keys left unset."""
    return Bursts(load.burst_size or BURST_SIZE, load.burst_every_s or BURST_EVERY_S, load.idle_s or 0.0)


def start_offsets(load: LoadSpec, seed: int, worker: tuple[int, int] | None = None) -> Iterator[float]:
    """Each conversation's start, seconds after the load began, in order and without end. `worker` (k, N): worker
    k's of N (load/backend/processes.py), whose conversations are the run's k-th, k+N-th, ...: its bursts are
    theirs in the run's (so the workers' together are the run's, at the same times), and its Poisson arrivals are
    drawn from a stream of the seed of its own, at its share of the rates (`worker_share`)."""
    rng = np.random.default_rng([seed, POISSON_STREAM, *(worker[:1] if worker else ())])
    if load.arrival == "bursts":
        b = bursts(load)
        k, n = worker or (0, 1)
        return (b.idle_s + (i // b.size) * b.every_s for i in itertools.count(k, n))
    if load.arrival == "series":
        return _stepped(rng, [(step.seconds, step.rate) for step in load.rates])
    if load.arrival == "zigzag":
        return _zigzag(rng, load.rate_low or 0.0, load.rate, load.period_s or PERIOD_S)
    if load.arrival == "poisson":
        return _stepped(rng, [(math.inf, load.rate)])
    raise ValueError(f"arrival = '{load.arrival}' has no start offsets: its requests start as slots free")


def _stepped(rng: np.random.Generator, steps: list[tuple[float, float]]) -> Iterator[float]:
    """Poisson arrivals at each step's rate (conversations per second) for its seconds; the last step's without
    end."""
    start = 0.0
    for i, (seconds, rate) in enumerate(steps):
        end = start + seconds if i + 1 < len(steps) else math.inf
        t = start
        while rate > 0:
            times = t + np.cumsum(rng.exponential(1 / rate, _CHUNK))
            inside = times[times < end]
            yield from inside.tolist()
            if len(inside) < _CHUNK:
                break
            t = float(times[-1])
        start = end


def zigzag_rate(t: np.ndarray, low: float, peak: float, period_s: float) -> np.ndarray:
    """The zigzag's rate at times `t`: `low` at 0, `peak` half a period later, `low` again at a period."""
    phase = np.mod(t / period_s, 1.0)
    return low + (peak - low) * (1.0 - np.abs(1.0 - 2.0 * phase))


def _zigzag(rng: np.random.Generator, low: float, peak: float, period_s: float) -> Iterator[float]:
    t = 0.0
    while True:
        times = t + np.cumsum(rng.exponential(1 / peak, _CHUNK))
        kept = rng.random(_CHUNK) * peak < zigzag_rate(times, low, peak, period_s)
        yield from times[kept].tolist()
        t = float(times[-1])


def worker_share(load: LoadSpec, count: int) -> dict[str, Any]:
    """The shape keys of worker k of `count` (a LoadSpec update): every rate divided by `count`, so that the
    workers' arrivals together come at the run's rates. (Bursts keep their keys: each worker starts its own
    conversations' places in the run's bursts, see `start_offsets`.)"""
    update: dict[str, Any] = {"rate": load.rate / count} if load.rate else {}
    if load.rate_low:
        update["rate_low"] = load.rate_low / count
    if load.rates:
        update["rates"] = tuple(step.model_copy(update={"rate": step.rate / count}) for step in load.rates)
    return update


def shape_words(load: LoadSpec) -> str:
    """The shape in one line: "bursts of 8 conversations every 1 s after 2 s idle"."""
    if load.arrival == "closed":
        unit = "sessions" if load.concurrency_unit == "session" else "requests"
        said = f"closed loop: {load.concurrency} {unit} in flight, each started as one ends"
    elif load.arrival == "poisson":
        said = f"Poisson arrivals at {load.rate:g} conversations/s"
    elif load.arrival == "bursts":
        b = bursts(load)
        said = f"bursts of {b.size} conversations every {b.every_s:g} s" + (
            f" after {b.idle_s:g} s idle" if b.idle_s else "")
    elif load.arrival == "series":
        steps = [f"{step.rate:g}/s for {step.seconds:g} s" for step in load.rates]
        said = f"Poisson arrivals in steps: {', '.join(steps)}, then {load.rates[-1].rate:g}/s on"
    else:
        said = (f"Poisson arrivals zigzagging from {load.rate_low or 0.0:g} up to {load.rate:g} conversations/s and "
                f"back every {load.period_s or PERIOD_S:g} s")
    if load.duration_s:
        said += f", for {load.duration_s:g} s"
    if load.max_rps:
        said += f"; at most {load.max_rps:g} request starts/s"
    if load.fresh_connections:
        said += "; a new connection per request"
    return said
