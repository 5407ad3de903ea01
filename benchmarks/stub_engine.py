"""A minimal streaming OpenAI-compatible stub for benchmarks, run in its own process.

    python benchmarks/stub_engine.py --port 0 --tokens 128 --ttft-ms 0 --itl-ms 0 [--tokenize]

Prints its URL on the first line. GET /stats returns (and resets) the server-side in-flight average (the sum of
request durations over the span from the first arrival to the last end: Little's law), the medians of the
TTFT and ITL the server really produced, so a client's timing error can be told from the stub's own jitter, and
each streamed request's arrival (time.monotonic(), the same clock in every process here) and produced TTFT.
Prompts are counted in words (a chat prompt: each message's role and content); with --tokenize a vLLM-style
POST /tokenize counts them the same way, without it a client can only learn lengths from usage. A request that
asks for logprobs gets each chunk with its token's logprob and a runner-up's, as vLLM streams them.
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
    parser.add_argument("--tokenize", action="store_true", help="offer vLLM's POST /tokenize")
    args = parser.parse_args()
    chunk = ("data: " + json.dumps({"id": "b", "object": "chat.completion.chunk", "model": "stub", "choices": [
        {"index": 0, "delta": {"content": " tok"}, "finish_reason": None}]}) + "\n\n").encode()
    listed = {"content": [{"token": " tok", "logprob": -0.01, "bytes": [32, 116, 111, 107], "top_logprobs": [
        {"token": " tok", "logprob": -0.01, "bytes": [32, 116, 111, 107]},
        {"token": " tik", "logprob": -5.2, "bytes": [32, 116, 105, 107]}]}]}
    chunk_logprobs = ("data: " + json.dumps({"id": "b", "object": "chat.completion.chunk", "model": "stub", "choices": [
        {"index": 0, "delta": {"content": " tok"}, "logprobs": listed, "finish_reason": None}]}) + "\n\n").encode()
    final = ("data: " + json.dumps({"id": "b", "object": "chat.completion.chunk", "model": "stub", "choices": [
        {"index": 0, "delta": {}, "finish_reason": "length"}]}) + "\n\n").encode()
    span = {"first": None, "last": 0.0, "busy": 0.0, "n": 0}
    ttfts: list[float] = []
    itls: list[float] = []
    arrivals: list[tuple[float, float]] = []  # (arrival, produced TTFT) per streamed request
    ends: list[float] = []  # when each streamed request's last byte was written

    def usage(prompt_tokens: int, completion_tokens: int) -> dict:
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    async def generate(request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        body = await request.json()
        prompt_tokens = count(body)
        if not body.get("stream"):  # a length probe: one token, no stream
            return web.json_response({"id": "b", "object": "chat.completion", "model": "stub", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "tok"}, "finish_reason": "length"}],
                "usage": usage(prompt_tokens, 1)})
        span["first"] = span["first"] or started
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        if args.ttft_ms:
            await asyncio.sleep(args.ttft_ms / 1000)
        previous = None
        written = chunk_logprobs if body.get("logprobs") else chunk
        for i in range(args.tokens):
            if i and args.itl_ms:
                await asyncio.sleep(args.itl_ms / 1000)
            await response.write(written)
            now = time.monotonic()
            if previous is None:
                ttfts.append(now - started)
                arrivals.append((started, now - started))
            else:
                itls.append(now - previous)
            previous = now
        tail = {"id": "b", "object": "chat.completion.chunk", "model": "stub", "choices": [],
                "usage": usage(prompt_tokens, args.tokens)}
        await response.write(final + f"data: {json.dumps(tail)}\n\ndata: [DONE]\n\n".encode())
        ended = time.monotonic()
        span["last"], span["busy"], span["n"] = ended, span["busy"] + ended - started, span["n"] + 1
        ends.append(ended)
        return response

    async def stats(_: web.Request) -> web.Response:
        wall = span["last"] - (span["first"] or span["last"])
        body = {"requests": span["n"], "in_flight_avg": span["busy"] / wall if wall > 0 else 0.0,
                "ttft_median_s": statistics.median(ttfts) if ttfts else 0.0,
                "itl_mean_s": statistics.mean(itls) if itls else 0.0, "arrivals": sorted(arrivals),
                "window": [span["first"] or 0.0, span["last"]], "ends": sorted(ends)}
        span.update(first=None, last=0.0, busy=0.0, n=0)
        ttfts.clear()
        itls.clear()
        arrivals.clear()
        ends.clear()
        return web.json_response(body)

    def count(body: dict) -> int:
        if "messages" in body:
            return sum(1 + len(str(m.get("content", "")).split()) for m in body["messages"]) + 1
        return len(str(body.get("prompt", "")).split()) + 1

    async def tokenize(request: web.Request) -> web.Response:
        n = count(await request.json())
        return web.json_response({"count": n, "max_model_len": 1 << 20, "tokens": list(range(n))})

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "stub"}]})

    app = web.Application()
    app.add_routes([web.post("/v1/chat/completions", generate), web.post("/v1/completions", generate),
                    web.get("/stats", stats),
                    web.get("/v1/models", models), web.get("/health", lambda _: web.Response())])
    if args.tokenize:
        app.add_routes([web.post("/tokenize", tokenize)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    web.run_app(app, sock=sock, print=None, access_log=None, backlog=4096)


if __name__ == "__main__":
    main()
