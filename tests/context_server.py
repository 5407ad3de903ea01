"""An engine with a context per request, as llama.cpp's slots have (`-c 4096 -np 2`: 2,048 tokens each), published
in /props as llama.cpp does. A prompt longer than it is, as llama.cpp before it refused them, cut to half the context
and answered with HTTP 200, its usage counting what was kept and its log (`log`, a file) saying so in llama.cpp's
words; with `refuses`, refused with a 400, as an engine should. `shrinks` instead counts every prompt that share
shorter than it is (a tokenizer that is not the one lengths were planned in: a calibration error, nothing cut).
Counts in the simulated engine's tokenizer, with a vLLM-style /tokenize, so planned lengths are exact."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from loadrepro.sim.tokenizer import render_chat, tokenize
from tests.stub_server import chat_app, chunk_event, serving


@dataclass
class ContextServer:
    n_ctx: int
    log: Path | None = None
    refuses: bool = False
    shrinks: float = 0.0
    cut: int = 0  # prompts it cut
    url: str = ""

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = render_chat(body["messages"]) if "messages" in body else str(body.get("prompt", ""))
        return web.json_response({"count": len(tokenize(text))})

    async def props(self, request: web.Request) -> web.Response:
        return web.json_response({"default_generation_settings": {"n_ctx": self.n_ctx}, "total_slots": 2})

    def _counted(self, prompt: int) -> int:
        """What its usage says of a prompt of `prompt` tokens."""
        if self.shrinks:
            return round(prompt * (1 - self.shrinks))
        if prompt < self.n_ctx:
            return prompt
        self.cut += 1
        kept = self.n_ctx // 2 + 1
        if self.log is not None:
            with self.log.open("a") as log:
                log.write(f"slot update_slots: id  0 | task {self.cut} | input truncated, n_ctx = {self.n_ctx}, "
                          f"n_keep = 0, n_left = {self.n_ctx}, n_prompt_tokens = {kept}\n")
        return kept

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = len(tokenize(render_chat(body["messages"])))
        if prompt >= self.n_ctx and self.refuses:
            return web.json_response({"error": {"code": 400, "type": "exceed_context_size_error", "message": (
                f"the request exceeds the available context size ({prompt} > {self.n_ctx} tokens)")}}, status=400)
        counted = self._counted(prompt)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for word in ("a", "b", "c", "d"):
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": word}}]}))
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
        await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": counted, "completion_tokens": 4}}))
        await response.write(b"data: [DONE]\n\n")
        return response

    @contextlib.contextmanager
    def running(self) -> Iterator[ContextServer]:
        app = chat_app("ctx", self.chat, web.post("/tokenize", self.tokenize), web.get("/props", self.props))
        with serving(app) as self.url:
            yield self
