"""A server whose latencies are set per request, for the service-level tests: by the order requests arrive in,
each is fast, late to its first token, slow between tokens, or refused with a 500, and the server keeps what it
did with each, so the test knows the attainment without asking loadrepro."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from tests.stub_server import chat_app, chunk_event, serving

TOKENS = 4


class SloServer:
    """`plan`: what the n-th request (from 0) gets, cycling: "fast" (first token at once, 5 ms between tokens),
    "late" (first token after `late_s`), "slow" (`slow_gap_s` between tokens), "error" (HTTP 500)."""

    def __init__(self, plan: tuple[str, ...], late_s: float = 0.3, slow_gap_s: float = 0.1) -> None:
        self.plan, self.late_s, self.slow_gap_s = plan, late_s, slow_gap_s
        self.done: Counter[str] = Counter()  # what the server did, by kind, for requests it answered to the end
        self._arrived = 0
        self.url = ""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        kind = self.plan[self._arrived % len(self.plan)]
        self._arrived += 1
        if kind == "error":
            self.done[kind] += 1
            return web.json_response({"error": {"message": "planned failure"}}, status=500)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if kind == "late":
            await asyncio.sleep(self.late_s)
        for i in range(TOKENS):
            if i:
                await asyncio.sleep(self.slow_gap_s if kind == "slow" else 0.005)
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " tok"},
                                                           "finish_reason": None}]}))
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": 100,
                                                                   "completion_tokens": TOKENS}}))
        await response.write(b"data: [DONE]\n\n")
        self.done[kind] += 1
        return response

    @contextmanager
    def running(self) -> Iterator[SloServer]:
        with serving(chat_app("slo", self.chat)) as self.url:
            yield self
