"""An engine with one slot whose HTTP frontend is starved while it works, as llama.cpp's is when requests waiting
for its only slot hold every HTTP thread: /health gets no answer while any request streams or waits, /metrics
answers late; the one running stream keeps receiving tokens. With `die_after_s`, the engine dies that long after
its first stream began: the stream is cut, later requests get 500, /health never answers again. With
`freeze_after_s`, it makes no progress for `freeze_s` from that long after its first stream began (no token, no
counter moving, /health unanswered), its process alive, then goes on: a slot held by a request no client reads.
Run as a process (a managed engine): python -m tests.starved_server --port PORT [--freeze-after S --freeze S]
[--exit-after S]."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiohttp import web

from tests.stub_server import chat_app, chunk_event, serving


@dataclass
class StarvedServer:
    token_s: float = 0.05
    metrics_hold_s: float = 0.9
    die_after_s: float | None = None
    freeze_after_s: float | None = None
    freeze_s: float = 5.0
    exit_after_s: float | None = None  # the process exits that long after the first stream began
    frozen: bool = False
    busy: int = 0  # requests streaming or waiting for the slot
    generated: int = 0
    dead: bool = False
    streams_started: list[float] = field(default_factory=list)
    _slot: asyncio.Lock | None = None

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):  # a token-count probe before the load
            return web.json_response({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
        if self.dead:
            return web.json_response({"error": {"message": "engine died"}}, status=500)
        self._slot = self._slot or asyncio.Lock()
        self.busy += 1
        try:
            async with self._slot:
                if self.dead:
                    return web.json_response({"error": {"message": "engine died"}}, status=500)
                return await self._stream(request, body["max_tokens"])
        finally:
            self.busy -= 1

    async def _stream(self, request: web.Request, tokens: int) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        self.streams_started.append(time.monotonic())
        loop = asyncio.get_running_loop()
        if len(self.streams_started) == 1:
            if self.die_after_s is not None:
                loop.call_later(self.die_after_s, self._die)
            if self.freeze_after_s is not None:
                loop.call_later(self.freeze_after_s, self._freeze)
            if self.exit_after_s is not None:
                loop.call_later(self.exit_after_s, os._exit, 1)
        for _ in range(tokens):
            await asyncio.sleep(self.token_s)
            while self.frozen:
                await asyncio.sleep(0.02)
            if self.dead:
                request.transport.close()  # cut mid-stream, as a crashed engine's are
                return response
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " ok"},
                                                           "finish_reason": None}]}))
            self.generated += 1
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": tokens}}))
        await response.write(b"data: [DONE]\n\n")
        return response

    def _die(self) -> None:
        self.dead = True

    def _freeze(self) -> None:
        self.frozen = True
        asyncio.get_running_loop().call_later(self.freeze_s, setattr, self, "frozen", False)

    async def health(self, _: web.Request) -> web.Response:
        while self.busy or self.dead:  # every HTTP thread is held; a dead engine answers nothing
            await asyncio.sleep(0.02)
        return web.Response(text="ok")

    async def metrics(self, _: web.Request) -> web.Response:
        if self.dead:
            await asyncio.sleep(3600)
        while self.frozen:
            await asyncio.sleep(0.02)
        if self.busy:
            await asyncio.sleep(self.metrics_hold_s)  # answered late, but answered, with its counters moved
        text = ("# TYPE vllm:num_requests_running gauge\n"
                f"vllm:num_requests_running {min(self.busy, 1)}\n"
                "# TYPE vllm:generation_tokens_total counter\n"
                f"vllm:generation_tokens_total {self.generated}\n")
        return web.Response(text=text)

    @contextlib.contextmanager
    def running(self) -> Iterator[str]:
        app = chat_app("stub", self.chat, web.get("/metrics", self.metrics), health=self.health)
        with serving(app) as url:
            yield url


def report_of(run_dir) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-s", type=float, default=0.05)
    parser.add_argument("--freeze-after", type=float)
    parser.add_argument("--freeze", type=float, default=5.0)
    parser.add_argument("--exit-after", type=float)
    args = parser.parse_args()
    server = StarvedServer(token_s=args.token_s, freeze_after_s=args.freeze_after, freeze_s=args.freeze,
                           exit_after_s=args.exit_after)
    app = chat_app("stub", server.chat, web.get("/metrics", server.metrics), health=server.health)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
