"""A chat server for malformed input on purpose: it parses each body as an engine must (UTF-8, JSON, the fields'
types, max_tokens) and refuses what is wrong with a 400 (a body over aiohttp's 1 MiB is its own 413), streaming 4
tokens to the rest. `mode` "dies_on_utf8": a body that is not UTF-8 kills it (500 to everything after, /health
503); "hangs_on_bad_json": broken JSON leaves it answering nothing from then on, that request included, while its
/health keeps saying 200; "latches_grammar": as vLLM 0.25.1 did, a grammar that defines its root twice is refused
(400) until a structured request (a choice) has set its grammar backend up, and kills it (500, /health 503) after;
"exits_on_utf8", run as a process (`python -m tests.bad_input_server --port N --mode exits_on_utf8`): a body that is
not UTF-8 aborts the process, as llama.cpp 0.3.7 did ("terminate called ... invalid UTF-8 byte"); "500_on_bad_json":
broken JSON is answered with a 500 and the server serves on, as llama.cpp does; "dies_after_500": as vLLM 0.25.1
did, broken JSON is answered with a 500 and the server dies half a second later (500 to everything, /health 503).
`token_delay_s` paces its tokens (--token-delay as a process): a run's faults on purpose, due some time into the
load, then come while it still serves."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiohttp import web

from tests.stub_server import chat_app, chunk_event, serving

DYING_S = 0.5  # how long "dies_after_500" serves on after its 500


@dataclass
class BadInputServer:
    mode: str = "refuses"
    token_delay_s: float = 0.02
    dead: bool = False
    hung: bool = False
    refused: list[str] = field(default_factory=list)  # why each malformed body was refused
    latched: bool = False  # a structured request has set the grammar backend up
    url: str = ""

    def _why_bad(self, raw: bytes) -> str | None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            if self.mode == "exits_on_utf8":
                print("terminate called after throwing an instance of 'std::runtime_error'\n"
                      "  what():  invalid UTF-8 byte", flush=True)
                os._exit(134)
            if self.mode == "dies_on_utf8":
                self.dead = True
            return "invalid UTF-8"
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            if self.mode == "hangs_on_bad_json":
                self.hung = True
            if self.mode == "dies_after_500":
                asyncio.get_running_loop().call_later(DYING_S, setattr, self, "dead", True)
            return "500: invalid JSON" if self.mode in ("500_on_bad_json", "dies_after_500") else "invalid JSON"
        if not isinstance(body.get("messages"), list) or not isinstance(body.get("max_tokens", 1), int):
            return "wrong types"
        if body.get("model") != "bad":  # as vLLM does, before it reads the rest: a body for another model says
            return "404: unknown model"  # nothing of how the engine takes a bad max_tokens or a huge prompt
        if body.get("max_tokens", 1) < 1:
            return "max_tokens must be at least 1"
        return self._grammar(body.get("structured_outputs") or {})

    def _grammar(self, outputs: dict) -> str | None:
        if "choice" in outputs:
            self.latched = True
        grammar = outputs.get("grammar")
        if grammar is None or grammar.count("root ::=") < 2:
            return None
        if self.mode == "latches_grammar" and self.latched:
            self.dead = True
        return 'Rule "root" is defined multiple times'

    async def chat(self, request: web.Request) -> web.StreamResponse:
        if self.dead:
            return web.json_response({"error": {"message": "engine dead"}}, status=500)
        raw = await request.read()  # over 1 MiB: aiohttp answers 413 itself
        why = self._why_bad(raw)
        if self.hung:
            await asyncio.Event().wait()  # until the client leaves
        if self.dead:
            return web.json_response({"error": {"message": "engine dead"}}, status=500)
        if why is not None:
            self.refused.append(why)
            status = 500 if why.startswith("500: ") else 404 if why.startswith("404: ") else 400
            return web.json_response({"error": {"message": why, "type": "BadRequestError"}}, status=status)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(4):
            await asyncio.sleep(self.token_delay_s)
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                           "finish_reason": None}]}, "bad"))
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, "bad"))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=503 if self.dead else 200)

    @contextlib.contextmanager
    def running(self) -> Iterator[BadInputServer]:
        with serving(chat_app("bad", self.chat, health=self.health)) as self.url:
            yield self


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", default="refuses")
    parser.add_argument("--token-delay", type=float, default=0.02)
    args = parser.parse_args()
    server = BadInputServer(args.mode, args.token_delay)
    web.run_app(chat_app("bad", server.chat, health=server.health), host="127.0.0.1", port=args.port,
                access_log=None, print=None)


if __name__ == "__main__":
    main()
