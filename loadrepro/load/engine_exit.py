"""A managed engine's exit, seen the instant it happens: engine death at that instant, not connection errors found
later. Noted once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from loadrepro.load.engine import describe_exit
from loadrepro.load.pause import pause

POLL_S = 0.1  # how often the engine's process is looked at
SETTLE_LOOKS = 10  # when requests were failing at the end: how many looks, POLL_S apart, its exit may take


class EngineExit:
    def __init__(self, exit_code: Callable[[], int | None] | None, on_exit: Callable[[str], None]) -> None:
        """`exit_code`: the engine's (None while it runs; no callable: not an engine loadrepro started).
        `on_exit`: told once, in words, how the process ended."""
        self._exit_code, self._on_exit = exit_code, on_exit
        self._noted = False

    @property
    def managed(self) -> bool:
        return self._exit_code is not None

    def running(self) -> bool | None:
        """Whether it runs now (None: not an engine loadrepro started)."""
        return None if self._exit_code is None else self._exit_code() is None

    def exited(self) -> bool:
        """True once it has exited; the first time, `on_exit` is told."""
        code = self._exit_code() if self._exit_code else None
        if code is None:
            return False
        if not self._noted:
            self._noted = True
            self._on_exit(f"the engine process {describe_exit(code)}")
        return True

    async def settle(self, failing: bool) -> None:
        """An exit that cut the last requests counts, however quick: the kernel closes a dying process's sockets
        a moment before its exit can be collected, so wait that moment when requests were `failing`."""
        if self._exit_code is None:
            return
        for _ in range(SETTLE_LOOKS if failing else 1):
            if self.exited():
                return
            if failing:
                await asyncio.sleep(POLL_S)

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self.exited():
                return
            await pause(stop, POLL_S)
