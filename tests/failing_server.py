"""A test server whose every stream fails as llama.cpp's does when a slot's context is exceeded (an error event in
a 200 stream), just after the second /health poll that came once it started: so soon after it that a failure's
extra poll is not sent (polls come at most every 100 ms), and so a run whose load ends with those failures polls
/health once more after them, its last word, and no more. /health answers 200, or, with `dying`, 503 once that many
streams have failed (an engine that failed its work and then said so). Token-count requests (no stream) are
answered at once.

Served in-process (tests.stub_server.serving(app(...))).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from tests.stub_server import chat_app, chunk_event

ERROR = {"error": {"code": 400, "message": "Context size has been exceeded.", "type": "exceed_context_size_error"}}
AFTER_POLL_S = 0.03  # after the poll it waited for, before the failure: less than the gap between extra polls


def app(dying: int | None = None) -> web.Application:
    failed, polls = [0], [0]
    polled = asyncio.Condition()

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                       "finish_reason": None}]}, "m"))
        wanted = polls[0] + 2
        async with polled:
            await polled.wait_for(lambda: polls[0] >= wanted)
        await asyncio.sleep(AFTER_POLL_S)
        await response.write(f"data: {json.dumps(ERROR)}\n\n".encode())
        failed[0] += 1
        return response

    async def health(_: web.Request) -> web.Response:
        polls[0] += 1
        async with polled:
            polled.notify_all()
        return web.Response(status=503 if dying is not None and failed[0] >= dying else 200)

    return chat_app("m", chat, health=health)
