"""Live progress of a run: a rich panel on a terminal, a plain line every few seconds otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from loadrepro.load.live import LiveState
from loadrepro.runs.streams import written

if TYPE_CHECKING:
    from rich.live import Live

_PLAIN_EVERY_S = 5.0

Say = Callable[[str], None]  # where a command's lines to its user go (print, a test's list, a logger)


def _line(state: LiveState) -> str:
    elapsed = (time.perf_counter_ns() - state.started_ns) / 1e9
    done = sum(state.outcomes.values())
    total = f"/{state.total}" if state.total else ""
    parts = [f"{elapsed:6.1f}s", f"in flight {state.in_flight}", f"done {done}{total}"]
    if state.outcomes:
        parts.append(" ".join(f"{k}={v}" for k, v in sorted(state.outcomes.items())))
    parts.append(f"health {state.health if state.health is not None else '-'}")
    if state.kv_usage is not None:
        parts.append(f"KV {state.kv_usage:.0%}")
    if state.total and done:
        parts.append(f"ETA {elapsed / done * (state.total - done):.0f}s")
    elif state.deadline_s:
        parts.append(f"ends in {max(0.0, state.deadline_s - elapsed):.0f}s")
    if state.stopping:
        parts.append(f"stopping: {state.stopping}")
    return "  ".join(parts)


class Progress:
    """Use as a context manager; `update` is the runner's progress callback."""

    def __init__(self, quiet: bool = False) -> None:
        self._quiet = quiet
        self._tty = sys.stderr.isatty()
        self._live: Live | None = None
        self._last_plain = 0.0
        self._last_stopping: str | None = None

    def __enter__(self) -> Callable[[LiveState], Awaitable[None]] | None:
        if self._quiet:
            return None
        if self._tty:
            from rich.console import Console  # imported where the panel is shown: 50 ms that a quiet run skips
            from rich.live import Live

            self._live = Live(console=Console(stderr=True), refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self.update

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    async def update(self, state: LiveState) -> None:
        if self._live is not None:
            self._live.update(_line(state))
            return
        now = time.monotonic()
        if now - self._last_plain >= _PLAIN_EVERY_S or state.stopping != self._last_stopping or state.finished:
            self._last_plain, self._last_stopping = now, state.stopping
            line = _line(state)
            written(lambda: print(line, file=sys.stderr, flush=True), sys.stderr)
