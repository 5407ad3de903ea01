"""A chat server whose words are hostile to a web page: its model's name and its error texts are the strings that end
or bend an HTML page's parsing where they are embedded as they came (`<!--<script>` inside a script element swallows
the rest of the page, `</script>` ends it early, U+2028 ended a JavaScript string before ES2019). Of the streamed
requests, the first of every three completes and the others fail, alternately with a 500 and with an error event in
the stream, each failure carrying the next of HOSTILE; it publishes no /metrics (404), as an engine without KV
figures does. A request not streamed (the token counting's probes) gets the same stream, which it cannot read."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiohttp import web

from tests.stub_server import chat_app, chunk_event, serving

HOSTILE = ("<!--<script>", "</script><script>alert(1)</script>", "line\u2028separator\u2029paragraph", "]]>",
           "\"quoted\" 'single' `back`", "<!--loadrepro:scripts-->", "&amp; &lt;b&gt; <b>bold</b>", "</SCRIPT >")
MODEL = "<!--<script>model</script>"


@dataclass
class HostileServer:
    url: str = ""
    _streamed: itertools.count[int] = field(default_factory=itertools.count)
    _failed: itertools.count[int] = field(default_factory=itertools.count)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        n = next(self._streamed) if (await request.json()).get("stream") else 0
        text = HOSTILE[next(self._failed) % len(HOSTILE)] if n % 3 else ""
        if n % 3 == 1:  # the text as it is, U+2028 included: not written as an escape
            return web.Response(text=json.dumps({"error": {"message": text}}, ensure_ascii=False), status=500,
                                content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                       "finish_reason": None}]}, MODEL))
        if n % 3 == 2:
            await response.write(f"data: {json.dumps({'error': {'message': text}}, ensure_ascii=False)}\n\n".encode())
            return response
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, MODEL))
        await response.write(b"data: [DONE]\n\n")
        return response

    @contextlib.contextmanager
    def running(self) -> Iterator[HostileServer]:
        with serving(chat_app(MODEL, self.chat)) as self.url:
            yield self
