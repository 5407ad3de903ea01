"""A server that breaks at a load of its own: a request that arrives while `limit` others are in flight is
answered 500 (admission control that gives up), others stream after `think_s`; /health stays 200. The breaking
point of a concurrency sweep is therefore exactly limit + 1. With `hold_models_after` N, the first GET /v1/models
after N chat requests were answered (the next run asking it while it plans) gets no answer, and `held` is set: a
moment between a sweep's runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from tests.stub_server import chat_app, chunk_event, serving


class OverloadServer:
    def __init__(self, limit: int | None, think_s: float = 0.2, tokens: int = 4, serial: bool = False,
                 hold_models_after: int | None = None) -> None:
        """`serial`: one request thinks at a time (the others wait their turn), so the first token comes later the
        more requests are in flight: about their number times `think_s`."""
        self.limit, self.think_s, self.tokens = limit, think_s, tokens
        self._turn = asyncio.Lock() if serial else None
        self.in_flight = self.most = self.refused = 0
        self.url = ""
        self.hold_models_after, self.answered = hold_models_after, 0
        self.held = threading.Event()  # set from the server's thread; the test waits on it

    async def models(self, request: web.Request) -> web.Response:
        if self.hold_models_after is not None and self.answered >= self.hold_models_after and not self.held.is_set():
            self.held.set()
            await asyncio.sleep(3600)  # cancelled when the client goes or the server stops
        return web.json_response({"object": "list", "data": [{"id": "overload", "object": "model"}]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        if self.limit is not None and self.in_flight >= self.limit:
            self.refused += 1
            return web.json_response({"error": {"message": "overloaded"}}, status=500)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            if self._turn is not None:
                async with self._turn:
                    await asyncio.sleep(self.think_s)
            else:
                await asyncio.sleep(self.think_s)
            for _ in range(self.tokens):
                await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                               "finish_reason": None}]}))
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
            await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": 100,
                                                                       "completion_tokens": self.tokens}}))
            await response.write(b"data: [DONE]\n\n")
            self.answered += 1
            return response
        finally:
            self.in_flight -= 1

    @contextmanager
    def running(self) -> Iterator[OverloadServer]:
        with serving(chat_app("overload", self.chat, models=self.models)) as self.url:
            yield self
