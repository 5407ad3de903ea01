"""Canaries: a salted one-token request every [watch] canary_interval_s, on a connection of its own and outside the
workload's concurrency, timed to its first token.

A canary's token is the engine making progress, whatever /health says; a canary that gets nothing while /health
answers 200 is the engine wedged while it tells its orchestrator all is well (vllm#39863, sglang#33858). Each
canary's text begins with random words, so it shares no prefix with the run (nothing it sends warms the cache for
the workload) nor with other canaries. One is in flight at a time: a wedged engine is not sent a pile of them.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from loadrepro.load.client import Client, ClientConfig, Progress
from loadrepro.load.pause import pause
from loadrepro.records import CanarySample, Outcome, RequestRecord
from loadrepro.workload.apis import chat_form
from loadrepro.workload.model import PlannedRequest

CANARY_CONVERSATION = -1  # canaries' records are samples, never the workload's requests


def one_token_request(api: str, text: str) -> PlannedRequest:
    """A streamed one-token greedy request of `text`, planned as any API takes it (workload/apis.py)."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": text}]} if chat_form(api) else {"prompt": text}
    body |= {"max_tokens": 1, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0}
    if api == "chat":
        body["max_completion_tokens"] = 1
    return PlannedRequest(CANARY_CONVERSATION, 0, body, 1, 0, 0)


def salted_request(api: str, what: str = "canary") -> PlannedRequest:
    """A one-token request whose text starts with a fresh salt (canaries, and the probe's checks of each API)."""
    return one_token_request(api, f"{what} {secrets.token_hex(8)}: answer with one word.")


class Canaries:
    """Sends canaries until stopped; each one's end becomes a CanarySample (via `on_sample`)."""

    def __init__(self, config: ClientConfig, interval_s: float, activity: Progress,
                 on_sample: Callable[[CanarySample], None], clock: Callable[[], int] = time.perf_counter_ns) -> None:
        # Its own client: its own connections, no retries (a throttled canary says so), the run's silence limits.
        self._config = replace(config, concurrency=1, max_retries=0)
        self._interval_s, self._activity, self._on_sample, self._clock = interval_s, activity, on_sample, clock
        self.sent = 0
        self.in_flight = 0  # the engine runs it as one of its requests: its running count counts it

    async def run(self, stop: asyncio.Event) -> None:
        async with Client(self._config, self._clock, self._activity) as client:
            while not stop.is_set():
                started = self._clock()
                send = asyncio.ensure_future(self._one(client))
                stopping = asyncio.ensure_future(stop.wait())
                try:
                    await asyncio.wait({send, stopping}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopping.cancel()
                if not send.done():  # the run is over: a canary in flight says nothing more
                    send.cancel()
                    await asyncio.gather(send, return_exceptions=True)
                    return
                await pause(stop, max(0.0, self._interval_s - (self._clock() - started) / 1e9))

    async def _one(self, client: Client) -> None:
        self.sent += 1
        self.in_flight += 1
        try:
            record = await client.send(-self.sent, salted_request(self._config.api), self._clock(), time.time(),
                                       lambda r: None)
        finally:
            self.in_flight -= 1
        self._on_sample(_sample(record, self._activity.last_ns))


def _sample(record: RequestRecord, progress_ns: int) -> CanarySample:
    ttft = record.ttft_ms
    detail = "" if record.outcome is Outcome.OK else record.detail[:500]
    return CanarySample(record.sent_or_queued_ns, record.end_ns, record.outcome.value,
                        round(ttft * 1e6) if ttft is not None else None, detail, progress_ns, record.signature)
