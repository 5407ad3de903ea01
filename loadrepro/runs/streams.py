"""Writing to the command's stdout and stderr, whose reader may go away (`loadrepro run ... 2>&1 | head`): that
ends the output, not the command. Imports nothing of loadrepro's: every command's output goes through it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TextIO


def written(write: Callable[[], None], stream: TextIO) -> None:
    """`write` to `stream` done; when its reader went away, later writes and the final flush go to /dev/null, and
    the command goes on: a run writes its files and exits with its verdict's code."""
    try:
        write()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
