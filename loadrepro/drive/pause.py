"""The one way a loop of the runner or a watcher waits: until its interval passes or it is told to stop."""

from __future__ import annotations

import asyncio


async def pause(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds`; True when `stop` was set (at once, if it already was)."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True
