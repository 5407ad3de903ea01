"""Saturation is not a bug: arrivals that outpace a server's steady service make a queue that grows window after
window, and the run says so (rule `saturated`, information) instead of failing for degradation; with
[load] stop_when_saturated the load ends there. A server whose service keeps up makes no such finding."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from aiohttp import web

import loadrepro
from tests.helpers import facts, fired
from tests.stub_server import chat_app, chunk_event, serving


@dataclass
class QueueServer:
    """`slots` streams at once, each `service_s` long; the rest wait in order (vLLM's num_requests_waiting)."""

    slots: int = 2
    service_s: float = 0.3
    waiting: int = 0
    busy: int = 0
    url: str = ""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.waiting += 1
        admitted = False
        try:
            async with self._slots:
                self.waiting, self.busy, admitted = self.waiting - 1, self.busy + 1, True
                return await self._stream(request, body)
        finally:  # a client that leaves while waiting leaves the queue
            if admitted:
                self.busy -= 1
            else:
                self.waiting -= 1

    async def _stream(self, request: web.Request, body: dict) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        tokens = int(body.get("max_tokens") or 3)
        for _ in range(tokens):
            await asyncio.sleep(self.service_s / tokens)
            await response.write(_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                      "finish_reason": None}]}))
        await response.write(_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=f"vllm:num_requests_running {self.busy}\nvllm:num_requests_waiting "
                                 f"{self.waiting}\nvllm:kv_cache_usage_perc 0.1\n")

    @contextlib.contextmanager
    def running(self) -> Iterator[QueueServer]:
        async def startup(_: web.Application) -> None:
            self._slots = asyncio.Semaphore(self.slots)  # made on the server's own loop

        app = chat_app("q", self.chat, web.get("/metrics", self.metrics))
        app.on_startup.append(startup)
        with serving(app) as self.url:
            yield self


def _event(payload: dict) -> bytes:
    return chunk_event(payload, "q")


PROFILE = """
name = "saturation"
api = "chat"
[workload]
seed = 3
conversations = 400
turns = 1
prefix_tokens = 200
max_tokens = 3
[load]
concurrency = {concurrency}
arrival = "poisson"
rate = {rate}
duration_s = {duration}
stall_timeout_s = 30
stop_when_saturated = true
[watch]
metrics_interval_s = 0.25
[verdict]
window_s = 1.5
"""


def soak(rate: float, duration_s: float, tmp_path, tokenizer_dir, concurrency: int = 400):
    path = tmp_path / "saturation.toml"
    path.write_text(PROFILE.format(rate=rate, duration=duration_s, concurrency=concurrency))
    with QueueServer().running() as server:
        return loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")


@pytest.mark.slow
def test_arrivals_beyond_the_service_rate_saturate_and_the_soak_stops_there_and_passes(tmp_path, tokenizer_dir):
    report = soak(16.0, 60, tmp_path, tokenizer_dir)  # the server serves 2 / 0.3 s = 6.7 requests a second
    assert report.passed, report
    grew = facts(report, "saturated")
    assert grew["in_flight_to"] > grew["in_flight_from"] and grew["waiting_to"] > grew["waiting_from"], grew
    assert report.stop_reason == "saturated"  # then, not at the soak's end
    assert not fired(report).get("degradation")


@pytest.mark.slow
def test_arrivals_queued_in_loadrepro_behind_its_concurrency_cap_saturate_too(tmp_path, tokenizer_dir):
    # concurrency 2 against a server of 2 slots: the engine never has a request waiting and loadrepro's in flight
    # stays at 2, while the requests due pile up in loadrepro, waiting to be sent
    report = soak(16.0, 60, tmp_path, tokenizer_dir, concurrency=2)
    assert report.passed, report
    grew = facts(report, "saturated")
    assert grew and grew["unsent_to"] > grew["unsent_from"], report.rules
    assert round(grew.get("waiting_to", 0)) == round(grew.get("waiting_from", 0)), grew  # the engine's: none grew
    assert "for a slot, median" in fired(report)["saturated"], grew
    assert report.stop_reason == "saturated"


@pytest.mark.slow
def test_arrivals_the_server_keeps_up_with_do_not_saturate(tmp_path, tokenizer_dir):
    report = soak(2.0, 9, tmp_path, tokenizer_dir)
    assert report.passed and not fired(report).get("saturated") and report.stop_reason == "duration"
    (tmp_path / "capped").mkdir()
    capped = soak(2.0, 9, tmp_path / "capped", tokenizer_dir, concurrency=2)  # a cap the arrivals fit within
    assert capped.passed and not fired(capped).get("saturated") and capped.stop_reason == "duration"


pytestmark = pytest.mark.timeout(120)
