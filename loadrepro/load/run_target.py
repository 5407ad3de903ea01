"""What preparing the target hands the load (runs/session.py to load/runner.py): where it is and what it is, the
engine loadrepro started and its replicas, and what was found of it before the load."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadrepro.config.capacity import EngineLimits, Prediction
from loadrepro.load.chaos import EngineControl, Oversize


@dataclass(frozen=True, slots=True)
class StartedReplica:
    """A replica loadrepro started (--replicas N): its log is followed and its exit seen, as the target's are."""

    index: int  # its replica number: 1 the first beside the target
    log: Path
    exit_code: Callable[[], int | None]  # None while it runs


@dataclass(frozen=True, slots=True)
class RunTarget:
    base_url: str
    model: str
    label: str
    engine_cmd: str | None = None
    engine_exit: Callable[[], int | None] | None = None  # a managed engine's exit code, None while it runs
    engine_log: Path | None = None  # the log of an engine loadrepro started: followed from its first line
    engine: EngineControl | None = None  # an engine loadrepro started, for faults on purpose
    oversize: Oversize | None = None  # a request just beyond what the engine can ever hold (from its limits)
    health_owner: str | None = None  # when the health path is not the engine's (a gateway's), in words
    started_replicas: tuple[StartedReplica, ...] = ()
    # What preparing the target found, handed to the result as it is made (never added to it after the run):
    limits: EngineLimits | None = None  # its KV limits, when known
    context: tuple[int, str] | None = None  # the longest sequence a request may have, and where it was read
    predictions: tuple[Prediction, ...] = ()
    # An engine loadrepro started and nothing warmed before the load: when it first answered /health 200
    # (perf_counter_ns; None: not known, or a warm-up answered before the load)
    fresh_engine_ns: int | None = None  # per planned request: fits, must wait, or can never fit
