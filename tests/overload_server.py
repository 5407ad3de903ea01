"""An engine of bounded throughput, run as an engine loadrepro starts (`--engine-cmd`): `--slots` streams at once,
one token every `--token-s`, the other requests queued in arrival order, so that arrivals past its service make a
queue it drains once they fall back. /health 200; vLLM-style /metrics publish its running and waiting requests, so
a run sees the queue. With `--stuck`, an engine that never recovers from overload: once more than `--overload`
requests have waited at once, every later request waits `--penalty-s` more before its first token (outside the
slots: its throughput stays what it was), for good, however low the load falls. A request that asks for no stream
gets its usage (token counting).

    python tests/overload_server.py --port 8000 [--stuck]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

if __package__ in (None, ""):  # run as a script (python tests/overload_server.py): the repository's root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.stub_server import chat_app, chunk_event  # noqa: E402


@dataclass
class OverloadServer:
    slots: int = 4
    token_s: float = 0.02
    overload: int = 8  # requests waiting at once past which a --stuck engine is slow for good
    penalty_s: float = 1.0
    stuck: bool = False
    running: int = 0
    waiting: int = 0
    overloaded: bool = False
    _free: asyncio.Semaphore | None = field(default=None, repr=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
        if self.stuck and self.overloaded:
            await asyncio.sleep(self.penalty_s)
        self._free = self._free or asyncio.Semaphore(self.slots)
        self.waiting += 1
        self.overloaded = self.overloaded or self.waiting > self.overload
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            return await self._stream(request, int(body.get("max_tokens") or 4))
        finally:
            self.running -= 1
            self._free.release()

    async def _stream(self, request: web.Request, tokens: int) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(tokens):
            await asyncio.sleep(self.token_s)
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                           "finish_reason": None}]}, "m"))
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, "m"))
        await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": tokens}},
                                         "m"))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=f"vllm:num_requests_running {self.running}\n"
                                 f"vllm:num_requests_waiting {self.waiting}\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--token-s", type=float, default=0.02)
    parser.add_argument("--overload", type=int, default=8)
    parser.add_argument("--penalty-s", type=float, default=1.0)
    parser.add_argument("--stuck", action="store_true")
    args = parser.parse_args()
    server = OverloadServer(args.slots, args.token_s, args.overload, args.penalty_s, args.stuck)
    app = chat_app("m", server.chat, web.get("/metrics", server.metrics))
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
