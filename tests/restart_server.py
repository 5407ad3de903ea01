"""A test engine loadrepro starts itself (an engine command), for faults on purpose: kill, restart and pause need a
process to stop. It counts its starts in `--state`; from its second start on it behaves as `--after`:
- "healthy": as before;
- "slow": every first token 20x later than before (an engine back up but never back to its latency);
- "zombies": /metrics reports 6 more requests running than it serves (requests it never freed);
- "dead": /health 503 and every request a 500 (up, but never back in service).
From its second start it listens only after `--slow-start` seconds (an engine slow to load again), and its /metrics
answers 503 for `--metrics-late` seconds once it listens (as llama.cpp's while it loads its model, though its
/health and requests are back).
The process of start `--crash-start` (a replica of `--replicas N`: the target is start 1) logs vLLM's fatal line
and is killed by SIGSEGV once it has streamed `--crash-after` answers (a replica that crashes while others serve).
Streams of `--tokens` tokens every `--delay` seconds, the first after `--ttft` seconds; /metrics in vLLM's names.

    python -m tests.restart_server --port 8000 --state /tmp/starts --after slow
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from pathlib import Path

from aiohttp import web

from tests.stub_server import chat_app, chunk_event


def _starts(state: Path) -> int:
    count = int(state.read_text()) + 1 if state.exists() else 1
    state.write_text(str(count))
    return count


def _crash() -> None:
    print("ERROR 12-03 10:00:00 [core.py:123] EngineCore encountered an issue. See stack trace (above) for the root "
          "cause.", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)


def app(after: str, restarted: bool, tokens: int, delay_s: float, ttft_s: float,
        crash_after: int | None = None, metrics_late_s: float = 0.0) -> web.Application:
    mode = after if restarted else "healthy"
    running = answered = 0
    metrics_from = time.monotonic() + (metrics_late_s if restarted else 0.0)

    async def chat(request: web.Request) -> web.StreamResponse:
        nonlocal running, answered
        if mode == "dead":
            return web.json_response({"error": {"message": "engine dead", "type": "InternalServerError"}}, status=500)
        await request.json()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        running += 1
        try:
            await asyncio.sleep(ttft_s * (20 if mode == "slow" else 1))
            for i in range(tokens):
                if i:
                    await asyncio.sleep(delay_s)
                await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                               "finish_reason": None}]}, "r"))
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, "r"))
            await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": 10,
                                                                       "completion_tokens": tokens}}, "r"))
            await response.write(b"data: [DONE]\n\n")
        finally:
            running -= 1
        answered += 1
        if crash_after is not None and answered >= crash_after:
            _crash()
        return response

    async def metrics(_: web.Request) -> web.Response:
        if time.monotonic() < metrics_from:
            return web.json_response({"error": {"code": 503, "message": "Loading model"}}, status=503)
        extra = 6 if mode == "zombies" else 0
        return web.Response(text=f"vllm:num_requests_running {running + extra}\nvllm:num_requests_waiting 0\n")

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=503 if mode == "dead" else 200)

    return chat_app("r", chat, web.get("/metrics", metrics), health=health,
                    handler_args={"handler_cancellation": True})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--after", choices=("healthy", "slow", "zombies", "dead"), default="healthy")
    parser.add_argument("--slow-start", type=float, default=0.0)
    parser.add_argument("--metrics-late", type=float, default=0.0)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--ttft", type=float, default=0.05)
    parser.add_argument("--crash-start", type=int, default=0)
    parser.add_argument("--crash-after", type=int, default=5)
    args = parser.parse_args()
    start = _starts(args.state)
    print(json.dumps({"start": start, "after": args.after}), flush=True)
    if start > 1:
        time.sleep(args.slow_start)
    crash_after = args.crash_after if start == args.crash_start else None
    web.run_app(app(args.after, start > 1, args.tokens, args.delay, args.ttft, crash_after, args.metrics_late),
                host="127.0.0.1",
                port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
