"""The one way a loop of the runner or a watcher waits: until its interval passes or it is told to stop; and the
one way a single wait (a poll, a scrape) is cut short when the run is interrupted."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")
ANSWER_GRACE_S = 0.5  # what a wait still gets once told to stop: a live engine answers a poll in milliseconds


async def pause(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds`; True when `stop` was set (at once, if it already was)."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def woken(stop: asyncio.Event, wake: asyncio.Event, seconds: float) -> bool:
    """`pause`, cut short also when `wake` is set (a watcher asked to read now); True when `stop` was set."""
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waits:
            waiter.cancel()
    return stop.is_set()


async def unless(stop: asyncio.Event, work: Awaitable[T]) -> T | None:
    """`work`'s result; or None when it has not come ANSWER_GRACE_S after `stop` is set (or was), `work` then cancelled:
    a poll of a hung engine waits its whole timeout, which no one who pressed Ctrl-C should wait out."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        await asyncio.wait((task,), timeout=ANSWER_GRACE_S)
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None
