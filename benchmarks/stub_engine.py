"""A minimal streaming OpenAI-compatible stub for benchmarks, run in its own process.

    python benchmarks/stub_engine.py --port 0 --tokens 128 --ttft-ms 0 --itl-ms 0

Prints its URL on the first line. GET /stats returns (and resets) the server-side in-flight average (the sum of
request durations over the span from the first arrival to the last end: Little's law) and the medians of the
TTFT and ITL the server really produced, so a client's timing error can be told from the stub's own jitter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import time

from aiohttp import web


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    args = parser.parse_args()
    chunk = ("data: " + json.dumps({"id": "b", "object": "chat.completion.chunk", "model": "stub", "choices": [
        {"index": 0, "delta": {"content": " tok"}, "finish_reason": None}]}) + "\n\n").encode()
    final = ("data: " + json.dumps({"id": "b", "object": "chat.completion.chunk", "model": "stub", "choices": [
        {"index": 0, "delta": {}, "finish_reason": "length"}]}) + "\n\n").encode()
    usage = ("data: " + json.dumps({"id": "b", "object": "chat.completion.chunk", "model": "stub", "choices": [],
                                    "usage": {"prompt_tokens": 1000, "completion_tokens": args.tokens}}) + "\n\n"
             + "data: [DONE]\n\n").encode()
    span = {"first": None, "last": 0.0, "busy": 0.0, "n": 0}
    ttfts: list[float] = []
    itls: list[float] = []

    async def generate(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        span["first"] = span["first"] or started
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        if args.ttft_ms:
            await asyncio.sleep(args.ttft_ms / 1000)
        previous = None
        for i in range(args.tokens):
            if i and args.itl_ms:
                await asyncio.sleep(args.itl_ms / 1000)
            await response.write(chunk)
            now = time.perf_counter()
            if previous is None:
                ttfts.append(now - started)
            else:
                itls.append(now - previous)
            previous = now
        await response.write(final + usage)
        ended = time.perf_counter()
        span["last"], span["busy"], span["n"] = ended, span["busy"] + ended - started, span["n"] + 1
        return response

    async def stats(_: web.Request) -> web.Response:
        wall = span["last"] - (span["first"] or span["last"])
        body = {"requests": span["n"], "in_flight_avg": span["busy"] / wall if wall > 0 else 0.0,
                "ttft_median_s": statistics.median(ttfts) if ttfts else 0.0,
                "itl_mean_s": statistics.mean(itls) if itls else 0.0}
        span.update(first=None, last=0.0, busy=0.0, n=0)
        ttfts.clear()
        itls.clear()
        return web.json_response(body)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "stub"}]})

    app = web.Application()
    app.add_routes([web.post("/v1/chat/completions", generate), web.get("/stats", stats),
                    web.get("/v1/models", models), web.get("/health", lambda _: web.Response())])
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    web.run_app(app, sock=sock, print=None, access_log=None, backlog=4096)


if __name__ == "__main__":
    main()
