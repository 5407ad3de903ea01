"""The exceptions raised when loadrepro itself cannot go on, and where the traceback of an unforeseen one is kept.

A misbehaving target is never an exception: it is recorded as data. These classes are for bad input and for
loadrepro's own failures, and the CLI maps them to exit codes.
"""

import traceback
from pathlib import Path


class LoadreproError(Exception):
    """Base of every error loadrepro raises on purpose."""

    exit_code = 3


class UsageError(LoadreproError):
    """The command line or an input file is wrong; the message says what to change."""

    exit_code = 2


class ProfileError(UsageError):
    """A profile cannot be loaded or validated."""


class TraceError(UsageError):
    """A trace file cannot be read: the message names the file, the line (or row) and the field."""


class SimConfigError(UsageError):
    """The simulated engine was given impossible sizing."""


class TargetError(LoadreproError):
    """The target cannot be set up for a run at all (not: the target failed under load)."""


class TargetRefused(LoadreproError):
    """The target refused loadrepro for authentication (401/403): the key is missing or wrong. A usage error: a
    run that went on with estimates instead would send a workload other than the one asked for."""

    exit_code = 2


def auth_refusal(what: str, status: int, text: str) -> TargetRefused:
    said = " ".join(text.split())[:200]
    return TargetRefused(f"the target refused {what} for authentication (HTTP {status}: {said}): "
                         "give it the API key in $OPENAI_API_KEY, or name the variable that holds it with "
                         "--api-key-env")


class TargetUnreachable(LoadreproError):
    """The target could not be reached at all when the run began: the target failed, so the exit code is 1."""

    exit_code = 1


class InternalError(LoadreproError):
    """loadrepro itself failed in a way it did not foresee (a bug): exit 3, with the traceback kept."""


def keep_traceback(exc: BaseException, path: Path) -> Path:
    """Write `exc`'s traceback to `path` (loadrepro's own bug: the one line on stderr names this file)."""
    path.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
    return path
