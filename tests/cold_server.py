"""A test engine loadrepro starts itself (an engine command) that stalls some of its streams: each stalled one gets a
first token and then nothing, until the client gives up on it. `--stall-first N`: its first N streams stall and the
rest are answered (a cold start: the note that a cold start may be the cause must be said); `--stall-after N`: its
first N streams are answered and those after stall (an engine that stalls once warm: no such note). A request that
asks for no stream (token counting) is answered at once and not counted. Its /metrics count the streams it finished
as vLLM's do (request_success_total), from `--served-before` (an engine that served others before the run): served
in-process (tests.stub_server.serving), it is a target at a URL known fresh from that count alone.

    python -m tests.cold_server --port 8000 --stall-first 4
"""

from __future__ import annotations

import argparse
import asyncio
import itertools

from aiohttp import web

from tests.stub_server import chat_app, chunk_event


def app(stall_first: int, stall_after: int | None, served_before: int = 0) -> web.Application:
    streams = itertools.count(1)
    finished = [served_before]

    def stalls(n: int) -> bool:
        return n <= stall_first or (stall_after is not None and n > stall_after)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                       "finish_reason": None}]}, "m"))
        if stalls(next(streams)):
            await asyncio.sleep(3600)  # silent until the client gives up (the handler is cancelled then)
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, "m"))
        await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 1}},
                                         "m"))
        await response.write(b"data: [DONE]\n\n")
        finished[0] += 1
        return response

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text="# TYPE vllm:request_success_total counter\n"
                                 f'vllm:request_success_total{{finished_reason="length"}} {finished[0]}\n')

    return chat_app("m", chat, web.get("/metrics", metrics))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stall-first", type=int, default=0)
    parser.add_argument("--stall-after", type=int, default=None)
    parser.add_argument("--served-before", type=int, default=0)
    args = parser.parse_args()
    web.run_app(app(args.stall_first, args.stall_after, args.served_before), host="127.0.0.1", port=args.port,
                access_log=None, print=None, handler_cancellation=True)


if __name__ == "__main__":
    main()
