"""The one owner of SIGINT and SIGTERM, for the command line.

While a load runs, a signal asks the runner to stop (it cancels what is in flight and still writes its report);
at any other moment (an engine starting, planning, writing reports) it raises KeyboardInterrupt where the program
is, so that every `finally` runs and every engine loadrepro started is stopped; the CLI then exits 130. A signal
that comes while loadrepro is already winding down is not raised again, so that stopping the engines finishes.

Python drops an exception raised while it runs a weakref callback or a `__del__` ("Exception ignored in ..."), and
a signal handler can run there: that KeyboardInterrupt is lost. So a signal is also kept (`received`): a run that
begins after one stops at once (`routed_to`), and `check` raises it again before the next run starts.

A KeyboardInterrupt raised while the event loop waits (a run planning, an engine starting) would leave the loop
itself, past every coroutine that could keep what ran before (a sweep's levels, the trials so far). So a run is
`stoppable`: in a task of its own, which a signal cancels, and the KeyboardInterrupt is raised in its caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine, Iterator
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    def __init__(self) -> None:
        self._route: Callable[[], None] | None = None
        self.received: int | None = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[Interrupts]:
        """Own the signals for the duration, then give them back as they were."""
        previous: dict[int, Any] = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}
        self.received = None
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.received is None
        self.received = signum
        if self._route is not None:
            self._route()
        elif first:
            raise KeyboardInterrupt

    def check(self) -> None:
        """Raise KeyboardInterrupt for a signal already received (its first raise may have been lost)."""
        if self.received is not None and self._route is None:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def routed_to(self, stop: Callable[[], None]) -> Iterator[None]:
        """While inside, a signal calls `stop` on the running event loop instead of raising; one received before
        (whose raise was lost) calls it at once."""
        loop = asyncio.get_running_loop()
        previous = self._route

        def route() -> None:
            loop.call_soon_threadsafe(stop)

        self._route = route
        if self.received is not None:
            route()
        try:
            yield
        finally:
            self._route = previous

    async def stoppable(self, work: Coroutine[Any, Any, T]) -> T:
        """`work`'s result, `work` run as a task that a signal cancels wherever it is, so that its `finally`s run
        (the engines it started are stopped) and KeyboardInterrupt is then raised here, in the caller's task. What
        `work` routes the signal to itself (a run's load, which stops and writes its report) takes it instead."""
        task = asyncio.ensure_future(work)

        def cancel() -> None:
            task.cancel()

        with self.routed_to(cancel):
            try:
                return await task
            except asyncio.CancelledError:
                caller = asyncio.current_task()
                if self.received is None or (caller is not None and caller.cancelling()):
                    raise  # cancelled by its caller, not by a signal
                raise KeyboardInterrupt from None


INTERRUPTS = Interrupts()
