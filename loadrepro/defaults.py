"""Defaults every entry point shares (the command line, the Python API, the sessions, a managed engine): one
definition each, so the command line's default and the API's cannot drift apart."""

from datetime import UTC, datetime

API_KEY_ENV = "OPENAI_API_KEY"  # the environment variable holding the target's API key, unless told another
ENGINE_START_TIMEOUT_S = 600.0  # how long a started engine may take to answer /health 200 (vLLM loads models)
SHRINK_MAX_TRIALS = 60  # runs a shrink may make
SHRINK_TIME_BUDGET_S = 600.0  # seconds a shrink may search


def run_stamp() -> str:
    """A run directory's name: the UTC time it was made, sortable."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
