"""A process of a deployment that only answers /health and /metrics (a decode pool behind a router): /health is 200
for its first `ok_polls` polls, then 503 for `down_polls` polls (None: from then on), then 200 again; /metrics gives
a vLLM-style KV usage and waiting count."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from tests.stub_server import serving


class PoolServer:
    def __init__(self, ok_polls: int | None, down_polls: int | None = None) -> None:
        self.ok_polls, self.down_polls = ok_polls, down_polls
        self.polls = 0
        self.url = ""

    async def health(self, _: web.Request) -> web.Response:
        self.polls += 1
        n = self.polls
        down = self.ok_polls is not None and n > self.ok_polls and (
            self.down_polls is None or n <= self.ok_polls + self.down_polls)
        return web.Response(status=503 if down else 200)

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(text='vllm:gpu_cache_usage_perc{model_name="m"} 0.42\n'
                                 'vllm:num_requests_waiting{model_name="m"} 3\n'
                                 'vllm:num_requests_running{model_name="m"} 1\n')

    @contextmanager
    def running(self) -> Iterator[PoolServer]:
        app = web.Application()
        app.add_routes([web.get("/health", self.health), web.get("/metrics", self.metrics)])
        with serving(app) as self.url:
            yield self
