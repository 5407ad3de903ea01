"""An engine shaped like llama-server with one unified KV pool, run as an engine loadrepro starts (`--engine-cmd`),
logging to its standard error in llama.cpp's words. A prompt longer than `--pool` tokens does not fit beside the
others: the engine logs `failed to find a memory slot for batch of size N` as it halves the batch, then
`Context size has been exceeded.`, and fails the request with HTTP 500 in those words (ggml-org/llama.cpp#23652).
With `--refuses`, it logs the same warnings but refuses such a prompt cleanly, with llama.cpp's 400
`exceed_context_size_error`, as an engine that checks at admission does. With `--mid-stream`, every such request
after the first fails after its stream began (a 200, a token, then an error event in the same words), as llama.cpp
does once it has started decoding: one failure in two outcomes. It answers /props as llama.cpp does, and
counts in the simulated engine's tokenizer (a vLLM-style /tokenize), so planned lengths are exact."""

from __future__ import annotations

import argparse
import sys

from aiohttp import web

from loadrepro.sim.tokenizer import render_chat, tokenize
from tests.stub_server import chat_app, chunk_event


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class KvPoolServer:
    def __init__(self, pool: int, refuses: bool, mid_stream: bool = False) -> None:
        self.pool, self.refuses, self.task = pool, refuses, 0
        self.mid_stream, self.overflowed = mid_stream, 0

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = render_chat(body["messages"]) if "messages" in body else str(body.get("prompt", ""))
        return web.json_response({"count": len(tokenize(text))})

    async def props(self, _: web.Request) -> web.Response:
        return web.json_response({"default_generation_settings": {"n_ctx": self.pool}, "total_slots": 4,
                                  "build_info": "b11312-0c1e5709"})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = len(tokenize(render_chat(body["messages"])))
        self.task += 1
        if prompt > self.pool:
            for size in (512, 256, 128):  # the batch halved, a warning each time: its number differs per line
                _log(f"decode: failed to find a memory slot for batch of size {size}")
            if self.refuses:
                return web.json_response({"error": {"code": 400, "type": "exceed_context_size_error", "message": (
                    f"request ({prompt} tokens) exceeds the available context size ({self.pool} tokens), try "
                    "increasing it")}}, status=400)
            _log(f"srv  update_slots: Context size has been exceeded. off = 0, n_batch = 1, ret = 1 (task {self.task})")
            error = {"error": {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}}
            self.overflowed += 1
            if self.mid_stream and self.overflowed > 1:
                return await self._fails_mid_stream(request, error)
            return web.json_response(error, status=500)
        _log(f"slot launch_slot_: id  0 | task {self.task} | processing task")
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        tokens = int(body.get("max_tokens") or 4)
        for _ in range(tokens):
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " x"},
                                                            "finish_reason": None}]}))
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        await response.write(chunk_event({"choices": [], "usage": {"prompt_tokens": prompt,
                                                                   "completion_tokens": tokens}}))
        await response.write(b"data: [DONE]\n\n")
        return response


    async def _fails_mid_stream(self, request: web.Request, error: dict) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        token = {"choices": [{"index": 0, "delta": {"content": " x"}, "finish_reason": None}]}
        await response.write(chunk_event(token))
        await response.write(chunk_event(error))
        return response


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--pool", type=int, default=400)
    parser.add_argument("--refuses", action="store_true")
    parser.add_argument("--mid-stream", action="store_true")
    parser.add_argument("-m", "--model", default="tiny.gguf")
    parser.add_argument("-np", "--parallel", type=int, default=-1)  # llama-server's flags, taken as it takes them:
    parser.add_argument("-kvu", "--kv-unified", action="store_true")  # the pool stays one (what --fit is told)
    args = parser.parse_args()
    server = KvPoolServer(args.pool, args.refuses, args.mid_stream)
    _log(f"main: loading model '{args.model}'")
    for _ in range(3):
        _log("load: special_eos_id is not in special_eog_ids - the tokenizer config may be incorrect")
    app = chat_app("tiny", server.chat, web.post("/tokenize", server.tokenize), web.get("/props", server.props))
    _log(f"main: server is listening on http://{args.host}:{args.port}")
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
