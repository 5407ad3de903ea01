"""The embedded default target: the command line that runs the simulated engine as a managed engine."""

from __future__ import annotations

import shlex
import sys

from loadrepro.config.profile import SimSpec


def sim_engine_command(spec: SimSpec) -> str:
    """A `{host}`/`{port}` command template for ManagedEngine: every [sim] setting given becomes its `sim` flag,
    since the `sim` command's flags are generated from the same fields."""
    words = [sys.executable, "-m", "loadrepro", "sim"]
    for key, value in spec.model_dump(exclude_none=True).items():
        flag = key.replace("_", "-")
        words += [f"--{flag}" if value else f"--no-{flag}"] if isinstance(value, bool) else [f"--{flag}", str(value)]
    return shlex.join(words) + " --host {host} --port {port}"


def as_typed(command: str) -> str:
    """The simulated engine's command as a user would type it (`loadrepro sim ...`), for reports: the interpreter
    path it runs with belongs to this machine."""
    prefix = shlex.join([sys.executable, "-m", "loadrepro"])
    return "loadrepro" + command[len(prefix):] if command.startswith(prefix + " ") else command
