"""A loadrepro command run in its own process and sent SIGINT at a chosen moment: what the Ctrl-C tests share."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.helpers import until

ROOT = Path(__file__).resolve().parents[1]


def interrupted_when(args: list[str], ready: Callable[[], bool], timeout_s: float = 240) -> tuple[int, str]:
    """`loadrepro *args`, sent SIGINT once `ready()` holds (looked at every 50 ms while it runs); its exit code and
    output (stdout and stderr together). Fails if it ended, or `ready()` never held, before; killed if it outlives
    two minutes after the signal."""
    process = subprocess.Popen([sys.executable, "-m", "loadrepro", *args], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        ended = until(lambda: ready() or process.poll() is not None, timeout_s, "the moment to interrupt it")
        assert ended is True and process.poll() is None, process.communicate(timeout=60)[0]
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, output
