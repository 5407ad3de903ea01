"""The embedded default target: the simulated engine in a child process of its own, with its log in a file."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from loadrepro.errors import TargetError
from loadrepro.profile import SimSpec

_URL = re.compile(r"http://\S+:\d+")
_FLAGS = {"block_size": "--block-size", "primary_blocks": "--primary-blocks", "draft_blocks": "--draft-blocks",
          "max_model_len": "--max-model-len", "beam_width": "--beam-width", "index_pool_bytes": "--index-pool-bytes",
          "prefill_tokens_per_s": "--prefill-tokens-per-s", "death_status": "--death-status",
          "death_mode": "--death-mode"}


def sim_command(spec: SimSpec, log: Path) -> list[str]:
    command = [sys.executable, "-m", "loadrepro", "sim", "--host", "127.0.0.1", "--port", "0", "--log", str(log),
               "--scenario", spec.scenario, "--policy", spec.policy]
    for key, flag in _FLAGS.items():
        value = getattr(spec, key)
        if value is not None:
            command += [flag, str(value)]
    if spec.step_s is not None:
        command += ["--step-ms", str(spec.step_s * 1000)]
    return command


class SimProcess:
    """Start with `start()`, stop with `stop()` (SIGTERM, then SIGKILL): the process is never left behind."""

    def __init__(self, spec: SimSpec, log: Path) -> None:
        self.command = sim_command(spec, log)
        self.log = log
        self._process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, timeout_s: float = 30.0) -> str:
        stderr = self.log.with_suffix(".stderr")
        with stderr.open("ab") as err:
            self._process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=err, text=True,
                                             start_new_session=True)  # Ctrl-C reaches loadrepro, which stops it
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self._process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        found = _URL.search(line[0]) if line else None
        if found is None:
            self.stop()
            detail = stderr.read_text(errors="replace")[-2000:] if stderr.exists() else ""
            raise TargetError(f"the simulated engine did not start within {timeout_s:.0f} s\n{detail}")
        self.url = found.group(0)
        return self.url

    def exit_code(self) -> int | None:
        return self._process.poll() if self._process else None

    def stop(self, grace_s: float = 5.0) -> int | None:
        process = self._process
        if process is None or process.poll() is not None:
            return process.returncode if process else None
        os.killpg(process.pid, signal.SIGTERM)
        try:
            return process.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            return process.wait()
