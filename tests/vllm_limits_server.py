"""An engine shaped as vLLM publishes its limits: `max_model_len` and `owned_by: vllm` in /v1/models, a KV pool in
/metrics' `vllm:cache_config_info` (block_size, num_gpu_blocks), a vLLM-style /tokenize. A request whose prompt and
max_tokens together exceed max_model_len is refused with vLLM's 400, before anything is generated; the others are
answered. `beyond`: what it does with such a request instead: "clamp" (the answer cut where the context ends,
finish_reason length, as llama.cpp and vLLM releases that clamp max_tokens do) or "serve" (the whole answer asked,
past its own longest sequence: a defect). Counts in the simulated engine's tokenizer, so planned lengths are exact."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from aiohttp import web

from loadrepro.sim.tokenizer import render_chat, tokenize
from tests.stub_server import chat_app, chunk_event, serving


@dataclass
class VllmLimitsServer:
    max_model_len: int
    block_size: int = 16
    num_gpu_blocks: int = 256
    beyond: str = "refuse"
    refused: int = 0
    url: str = ""

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": "tiny", "object": "model", "owned_by": "vllm", "max_model_len": self.max_model_len}]})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=(
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{self.block_size}",num_gpu_blocks="{self.num_gpu_blocks}"}} 1.0\n'
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"))

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = render_chat(body["messages"]) if "messages" in body else str(body.get("prompt", ""))
        return web.json_response({"count": len(tokenize(text))})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = len(tokenize(render_chat(body["messages"])))
        asked = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        if prompt + asked > self.max_model_len and self.beyond == "clamp":
            asked = max(1, self.max_model_len - prompt)
        elif prompt + asked > self.max_model_len and self.beyond == "refuse":
            self.refused += 1
            return web.json_response({"object": "error", "type": "BadRequestError", "code": 400, "message": (
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt + asked} tokens ({prompt} in the messages, {asked} in the completion). Please reduce the "
                "length of the messages or completion.")}, status=400)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(asked):
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": "a"}}]}))
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        await response.write(chunk_event({"choices": [], "usage": {
            "prompt_tokens": prompt, "completion_tokens": asked, "total_tokens": prompt + asked}}))
        await response.write(b"data: [DONE]\n\n")
        return response

    @contextlib.contextmanager
    def running(self) -> Iterator[VllmLimitsServer]:
        app = chat_app("tiny", self.chat, web.post("/tokenize", self.tokenize), web.get("/metrics", self.metrics),
                       models=self.models)
        with serving(app) as self.url:
            yield self
