"""A test engine loadrepro starts itself (an engine command) whose memory the run reads: it keeps `--leak-kb` of
memory for every request it answers (memory kept per request: rule engine_memory_growth must fire), or holds
`--hold-kb` only while a request is in flight and frees it after (memory that comes back: must not fire), or keeps it
for the first `--leak-until` requests only (a cache that fills: must not fire). It takes llama.cpp's `--cache-ram`
and ignores it, so that its command names a prompt cache's cap as llama-server's does. Streams
`--tokens` tokens, one every `--delay` seconds; a request that asks for no stream gets its usage (token counting).
Its /metrics publish prometheus_client's process collector (process_resident_memory_bytes), as vLLM's do: served
in-process (tests.stub_server.serving) it is a target at a URL whose memory the run reads from there.

    python -m tests.memory_server --port 8000 --leak-kb 1024
"""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import web
from prometheus_client import REGISTRY, generate_latest

from tests.stub_server import chat_app, chunk_event


def app(leak_kb: int, hold_kb: int, tokens: int, delay_s: float, leak_until: int | None = None) -> web.Application:
    kept: list[bytes] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
        held = b"h" * (hold_kb * 1024)  # written, so resident while the request runs
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(tokens):
            await asyncio.sleep(delay_s)
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                           "finish_reason": None}]}, "m"))
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, "m"))
        await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": tokens}},
                                         "m"))
        await response.write(b"data: [DONE]\n\n")
        if leak_until is None or len(kept) < leak_until:  # a cache that fills up to its size, then keeps no more
            kept.append(b"k" * (leak_kb * 1024))
        del held
        return response

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), content_type="text/plain")

    return chat_app("m", chat, web.get("/metrics", metrics))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--leak-kb", type=int, default=0)
    parser.add_argument("--hold-kb", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--leak-until", type=int, default=None, help="keep memory for this many requests only")
    parser.add_argument("--cache-ram", type=int, default=None, help="ignored: llama.cpp's flag, read from the command")
    args = parser.parse_args()
    web.run_app(app(args.leak_kb, args.hold_kb, args.tokens, args.delay, args.leak_until), host="127.0.0.1",
                port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
