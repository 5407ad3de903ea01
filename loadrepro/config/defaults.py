"""Defaults every entry point shares (the command line, the Python API, the sessions, a managed engine): one
definition each, so the command line's default and the API's cannot drift apart."""

import os
from datetime import UTC, datetime

API_KEY_ENV = "OPENAI_API_KEY"  # the environment variable holding the target's API key, unless told another
ENGINE_START_TIMEOUT_S = 600.0  # how long a started engine may take to answer /health 200 (vLLM loads models)
SHRINK_MAX_TRIALS = 60  # runs a shrink may make
SHRINK_TIME_BUDGET_S = 600.0  # seconds a shrink may search
# Set to 1: the embedded simulated engine is served on a thread of loadrepro's own process rather than as a process
# of its own (a second interpreter that imports loadrepro again, about a second a run). Its timing then shares this
# interpreter with the load; faults that stop the engine ([[chaos.events]] kill, restart, pause) still start it as
# a process, since only a process can be killed or paused.
SIM_IN_PROCESS_ENV = "LOADREPRO_SIM_IN_PROCESS"


def sim_in_process() -> bool:
    return os.environ.get(SIM_IN_PROCESS_ENV) == "1"


# Set to 0: a run's reports are written without their pictures (timeline.png, latency.png, report.html and an A/B's
# compare.html), which cost a run about half a second of drawing; report.json, report.md and junit.xml are the same.
PICTURES_ENV = "LOADREPRO_PICTURES"


def pictures_wanted() -> bool:
    return os.environ.get(PICTURES_ENV) != "0"


def run_stamp() -> str:
    """A run directory's name: the UTC time it was made, sortable."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
