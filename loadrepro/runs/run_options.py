"""What one run is given, whichever command or API call made it, and where it keeps what it writes."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loadrepro.config.defaults import API_KEY_ENV, ENGINE_START_TIMEOUT_S, run_stamp
from loadrepro.config.profile import Profile
from loadrepro.load.planning import PlanMemo

if TYPE_CHECKING:
    from loadrepro.schema.run_report import RunReport

REPORTS_ROOT = Path("reports")


@dataclass(frozen=True, slots=True)
class RunOptions:
    profile: Profile
    base_url: str | None  # None: start the embedded simulated engine
    model: str | None
    label: str
    out: Path | None
    api_key_env: str = API_KEY_ENV
    quiet: bool = False
    command: str = "loadrepro run"  # how to reproduce this run, for the report
    engine_cmd: str | None = None  # start this engine ({port}, {host}) instead of the simulated one
    engine_start_timeout_s: float = ENGINE_START_TIMEOUT_S
    size_to_overrun: float | None = None  # choose conversations and prefix length: this x the binding KV pool
    fit: bool = False  # scale prompts, turns and max_tokens so the longest request fits the target's limits
    tokenizer: Path | None = None  # count in this local Hugging Face tokenizer's tokens instead of asking the target
    pictures: bool = True  # report.html's charts (a shrink's trials go without: they are many)
    png: bool = False  # and the pictures as PNG files too
    workers: int = 1  # processes sending the load (load/backend/processes.py)
    ray: str | None = None  # "local" or a Ray cluster's address: workers are Ray actors (load/backend/ray_actors.py)
    on_verdict: Callable[[RunReport], None] | None = None  # told the verdict before the pictures are drawn
    trials: int = 1  # > 1: run N times, each on a fresh engine (runs/repeats.py)
    vary_seed: bool = False  # trials: trial i gets the seed + i - 1
    alpha: float = 0.05  # A/B trials: a fix is shown when the one-sided Fisher test's p is below this
    serve_metrics: int | None = None  # serve loadrepro's own metrics on 127.0.0.1:PORT while it runs (0: any port)
    replicas: int = 1  # start the engine this many times, each a replica (the first the target)
    plans: PlanMemo | None = None  # the runs of one command (trials, sweep levels) plan a workload once per engine
    # When the command began (perf_counter_ns), for report.json's timing: the command line's process start (so the
    # cost of its imports is in it); None: when this run's session began (an API call, a trial, a shrink's run, an
    # A/B's patched side): a process that runs many must not count the ones before.
    began_ns: int | None = None

    @property
    def api_key(self) -> str | None:
        """The target's key, from the environment variable `api_key_env` names (never written anywhere)."""
        return os.environ.get(self.api_key_env) or None


def run_directory(options: RunOptions) -> Path:
    if options.out is not None:
        path = options.out
    else:
        stamp = run_stamp()
        path = REPORTS_ROOT / f"{stamp}-{options.profile.name}-{options.label}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def process_start_ns() -> int | None:
    """When this process started, on the clock records use (CLOCK_MONOTONIC), from /proc where there is one."""
    try:
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_s = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time, since boot
        since_boot = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.perf_counter_ns()
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return int(started_s * 1e9) - since_boot
