"""A test server that records what a trace replay sends: when each request arrived, its prompt's tokens (the
simulated engine's tokenizer, chat template applied) and when its answer ended. Each answer takes `answer_s`, so a
turn sent before the one it continues had answered would be seen."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from aiohttp import web

from loadrepro.sim.tokenizer import render_chat, tokenize
from tests.stub_server import chat_app, chunk_event, serving


@dataclass
class Received:
    arrived_ns: int
    tokens: list[str]
    max_tokens: int
    body: dict
    ended_ns: int = 0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class TraceServer:
    answer_s: float = 0.3
    hold: Callable[[dict], float] = lambda body: 0.0  # seconds a request's answer takes beyond answer_s
    received: list[Received] = field(default_factory=list)
    started_ns: int = 0
    first: threading.Event = field(default_factory=threading.Event)  # set when the first request arrives

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):  # a token-count probe: usage only
            tokens = tokenize(render_chat(body["messages"]))
            return web.json_response({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": len(tokens), "completion_tokens": 1}})
        seen = Received(time.perf_counter_ns(), tokenize(render_chat(body["messages"])), body["max_tokens"], body,
                        headers=dict(request.headers))
        self.received.append(seen)
        self.first.set()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(self.answer_s + self.hold(body))
        for _ in range(min(seen.max_tokens, 4)):
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " ok"},
                                                           "finish_reason": None}]}))
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": len(seen.tokens),
                                                                    "completion_tokens": seen.max_tokens}}))
        seen.ended_ns = time.perf_counter_ns()
        await response.write(b"data: [DONE]\n\n")
        return response

    @contextlib.contextmanager
    def running(self) -> Iterator[str]:
        with serving(chat_app("trace-stub", self.chat)) as url:
            yield url
