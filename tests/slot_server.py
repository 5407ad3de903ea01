"""An engine of one slot, as llama.cpp with `-np 1`: each request waits for the slot (counted as deferred), then
streams `tokens` tokens every `delay_s` (counted as processing), both published in llama.cpp's metric names. A
stream whose client leaves frees the slot at once. A request whose client left while it waited is dropped, or
with `keeps_cancelled` still run when its turn comes, its tokens written to no one, holding the slot meanwhile
(llama.cpp before ggml-org/llama.cpp#11285). With `slow_request` N, the Nth request it receives (from 0) is answered
a token every `slow_delay_s` instead: a slot that slows down, not a queue that is long. Counted as requests arrive,
not as they are served: a request whose client left may still take the slot before the server notices, so the order
of service is not the test's to choose."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from aiohttp import web

from tests.stub_server import chat_app, chunk_event, serving


@dataclass
class SlotServer:
    tokens: int = 100
    delay_s: float = 0.05
    keeps_cancelled: bool = False
    processing: int = 0
    deferred: int = 0
    zombies_run: int = 0  # cancelled requests it ran anyway
    slow_request: int | None = None
    slow_delay_s: float = 1.5
    received: int = 0  # requests that arrived
    url: str = ""
    _slot: asyncio.Lock | None = None

    def _lock(self) -> asyncio.Lock:
        if self._slot is None:
            self._slot = asyncio.Lock()
        return self._slot

    async def _zombie(self) -> None:
        """Run a request whose client left, in the handler itself (so the server stopping ends it)."""
        self.deferred += 1
        try:
            await self._lock().acquire()
        except asyncio.CancelledError:
            self.deferred -= 1
            raise
        self.deferred -= 1
        self.processing += 1
        self.zombies_run += 1
        try:
            await asyncio.sleep(self.tokens * self.delay_s)
        finally:
            self.processing -= 1
            self._lock().release()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        delay = self.slow_delay_s if self.received == self.slow_request else self.delay_s
        self.received += 1
        self.deferred += 1
        try:
            await self._lock().acquire()
        except asyncio.CancelledError:  # the client left while it waited
            if self.keeps_cancelled:
                self.deferred -= 1  # waits again in _zombie
                await self._zombie()
            else:
                self.deferred -= 1
            raise
        self.deferred -= 1
        self.processing += 1
        written = 0
        try:
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            for _ in range(self.tokens):
                await asyncio.sleep(delay)
                await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                               "finish_reason": None}]}, "slot"))
                written += 1
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
                                             "slot"))
            await response.write(b"data: [DONE]\n\n")
            return response
        except (asyncio.CancelledError, ConnectionError):
            # the client left before its first token (it was cancelled while queued, and the server noticed only
            # once the slot was its): an engine that keeps cancelled requests runs it all the same
            if self.keeps_cancelled and written == 0:
                self.zombies_run += 1
                await asyncio.sleep(self.tokens * self.delay_s)
            raise
        finally:
            self.processing -= 1
            self._lock().release()

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=f"llamacpp:requests_processing {self.processing}\n"
                                 f"llamacpp:requests_deferred {self.deferred}\n")

    @contextlib.contextmanager
    def running(self) -> Iterator[SlotServer]:
        app = chat_app("slot", self.chat, web.get("/metrics", self.metrics),
                       handler_args={"handler_cancellation": True})
        with serving(app) as self.url:
            yield self
