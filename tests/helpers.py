"""What the tests share: running loadrepro's command line (in this process, or as a process of its own where the
process boundary is what a test checks: exit codes of the entry point, signals, what outlives it), reading what a
run wrote, and the small workloads most runs use."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]

# A conversations workload of a few short requests, as profile overrides: most runs against a test server need no
# more. `small()` gives them as --set flags.
SMALL = ("workload.conversations=3", "workload.prefix_tokens=200", "workload.turn_tokens=50", "workload.max_tokens=8")


def small(*extra: str) -> list[str]:
    """SMALL and `extra` overrides as the command line's --set flags."""
    return [flag for override in (*SMALL, *extra) for flag in ("--set", override)]


@dataclass(frozen=True, slots=True)
class Done:
    """A command's end as a process's would read: its exit code and what it wrote to stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    if not env:
        yield
        return
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cli(*args: str, env: Mapping[str, str] | None = None) -> Done:
    """`loadrepro ARGS` through the entry point (loadrepro.cli.commands.main: its signal handling, its exit codes) in
    this process: what it prints and the code it exits with, without an interpreter to start and the package to
    import again. `env` is set for the command's duration."""
    from loadrepro.cli.commands import main

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["loadrepro", *args]
    code: Any = 0
    try:
        with _environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exit_:
        code = exit_.code
    finally:
        sys.argv = argv
    return Done(code if isinstance(code, int) else 0 if code is None else 1, out.getvalue(), err.getvalue())


def spawn(*args: str, env: Mapping[str, str] | None = None, timeout: float = 180,
          cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m loadrepro ARGS` as a process of its own, for what only a process shows (its exit on a signal,
    the processes it leaves, an interpreter's start)."""
    return subprocess.run([sys.executable, "-m", "loadrepro", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)


def report(run_dir: Path) -> dict[str, Any]:
    """A run directory's report.json."""
    loaded: dict[str, Any] = json.loads((Path(run_dir) / "report.json").read_text())
    return loaded


def fired(report: Any) -> dict[str, str]:
    """The rules that fired, by name, with their detail: of a RunReport, or of report.json as read."""
    rules = report["rules"] if isinstance(report, dict) else [r.model_dump() for r in report.rules]
    return {r["name"]: r["detail"] for r in rules if r["fired"]}


def rule(report: Any, name: str) -> Any:
    """One rule's result, fired or not: a RuleResult of a RunReport, or a dict of report.json as read."""
    if isinstance(report, dict):
        return next(r for r in report["rules"] if r["name"] == name)
    return next(r for r in report.rules if r.name == name)


def facts(report: Any, name: str) -> dict[str, Any]:
    """What a rule found, as its named facts (empty when it did not fire): of a RunReport or of report.json."""
    rules = report["rules"] if isinstance(report, dict) else [r.model_dump() for r in report.rules]
    return next((r["facts"] for r in rules if r["name"] == name), {})


def until(done: Callable[[], T], timeout_s: float = 60, what: str = "") -> T:
    """`done()`'s first true value, looked at every 50 ms; AssertionError naming `what` after `timeout_s`. For what
    shows only outside the test's process (a file another process writes, a process ending, a port closing), which
    sends the test no event to wait on; a test server's own events are waited on as events."""
    deadline = time.monotonic() + timeout_s
    while not (value := done()):
        assert time.monotonic() < deadline, f"{what or done} did not happen within {timeout_s:g} s"
        time.sleep(0.05)
    return value


def rebuilt_alike(run_dir: Path) -> dict[str, Any]:
    """`loadrepro report RUN_DIR` judges a run as the run judged itself: the same verdict, each rule's firing,
    severity, detail and facts, and the capacity, chaos and log sections. The rebuilt report.json."""
    from loadrepro.runs.rebuild import rebuild

    before = report(run_dir)
    rebuild(Path(run_dir))
    after = report(run_dir)

    def judged(rep: dict[str, Any]) -> dict[str, Any]:
        return {r["name"]: (r["fired"], r["severity"], r["detail"], r["facts"]) for r in rep["rules"]}

    assert after["verdict"] == before["verdict"] and judged(after) == judged(before), (before["rules"], after["rules"])
    for section in ("capacity", "chaos", "log_excerpt", "watched_endpoints", "endpoints"):
        assert after.get(section) == before.get(section), (section, before.get(section), after.get(section))
    return after
