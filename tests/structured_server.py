"""A chat server for structured answers: a request with response_format gets `{"ok": true}` in pieces, one with
structured_outputs the first choice offered, `no, case 42` for a regex or a grammar, one with tools a call of the
tool whose arguments are `{"ok": true}` (others get plain tokens).
`mode` "breaks_under_load": while three or more requests are in flight, a structured answer ends half-way
(`{"ok": tr`, `n` for a choice, `no, case` for a regex or a grammar) as if it were complete (finish_reason stop);
"cut": every structured answer stops at max_tokens half-way (finish_reason length); "no_tool_parser": a request
with tools is refused with vLLM's 400 for an engine started without a tool parser; "refuses_all": every request is
refused so (an engine refusing what it should serve).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from tests.stub_server import chat_app, chunk_event, serving

WHOLE = ['{"ok"', ": ", "true}"]
WHOLE_MATCH = ["no", ", case", " 42"]  # what the default regex (and grammar) of [workload] allows
NO_TOOL_PARSER = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


class StructuredServer:
    def __init__(self, mode: str = "answers") -> None:
        self.mode = mode
        self.structured = self.plain = self.broken = self.in_flight = self.refused = 0
        self.formats: set[str] = set()
        self.url = ""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if self.mode == "refuses_all" or (self.mode == "no_tool_parser" and body.get("tools")):
            self.refused += 1
            return web.json_response({"error": {"message": NO_TOOL_PARSER, "type": "BadRequestError",
                                                "code": 400}}, status=400)
        self.in_flight += 1
        try:
            return await self._answer(request, body)
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request, body: dict) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(0.05)  # long enough for requests to overlap
        kind = _kind(body)
        pieces, finish = ([" t"] * 4, "length")
        if kind is not None:
            self.structured += 1
            self.formats.add(kind)
            whole = _whole(kind, body)
            pieces, finish = list(whole), "stop"
            if self.mode == "breaks_under_load" and self.in_flight >= 3:
                pieces, finish = (WHOLE[:1] + [": tr"]) if whole is WHOLE else whole[:-1] or ["n"], "stop"
                self.broken += 1
            elif self.mode == "cut":
                pieces, finish = whole[:-1] or ["n"], "length"
        else:
            self.plain += 1
        for i, piece in enumerate(pieces):
            await response.write(chunk_event({"choices": [{"index": 0, "delta": _delta(kind, i, piece),
                                                           "finish_reason": None}]}))
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
        await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": 100,
                                                                   "completion_tokens": len(pieces)}}))
        await response.write(b"data: [DONE]\n\n")
        return response

    @contextmanager
    def running(self) -> Iterator[StructuredServer]:
        with serving(chat_app("structured", self.chat)) as self.url:
            yield self


def _kind(body: dict) -> str | None:
    if body.get("response_format") is not None:
        return body["response_format"]["type"]
    if body.get("tools"):
        return "tools"
    outputs = body.get("structured_outputs") or {}
    return next(iter(outputs), None)


def _whole(kind: str, body: dict) -> list[str]:
    if kind == "choice":
        return [body["structured_outputs"]["choice"][0]]
    return WHOLE_MATCH if kind in ("regex", "grammar") else WHOLE


def _delta(kind: str | None, i: int, piece: str) -> dict:
    """Content, or for a tool call its arguments in pieces (the first piece with the call's id and name)."""
    if kind != "tools":
        return {"content": piece}
    call = {"index": 0, "function": {"arguments": piece}}
    if i == 0:
        call |= {"id": "call_0", "type": "function", "function": {"name": "record_verdict", "arguments": piece}}
    return {"tool_calls": [call]}
