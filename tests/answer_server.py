"""A chat-completions server whose answers are a function of the prompt, with logprobs, that answers differently
when other requests are in flight, in one of several ways: for testing the answer checks ([verify]).

Alone, every request gets its right answer: the conversation tag its prompt carries, then words drawn from a hash
of the prompt; each position leads its runner-up by CONFIDENT nats, except every NEAR_TIE_EVERY-th by NEAR_TIE.
With another request in flight:
- "healthy": the same answer.
- "swap": the answer of another request in flight (confidently wrong, and carrying that one's tag).
- "flip": each near-tie position answers its runner-up (batching's noise): not wrong.
- "garbled": one token repeated to the end, from the second position on.
- "fffd": an undecodable byte (U+FFFD) in the text.
- "empty": no text at all, with the completion tokens counted.
- "no_logprobs" (always without logprobs): near-ties flip as in "flip", so the texts differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiohttp import web

from tests.stub_server import chat_app, chunk_event, serving

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima")
CONFIDENT, NEAR_TIE, NEAR_TIE_EVERY = 5.0, 0.2, 4
TAG = re.compile(r"LR[A-Z2-7]{8}")
MODES = ("healthy", "swap", "flip", "garbled", "fffd", "empty", "no_logprobs")


@dataclass
class AnswerServer:
    mode: str = "healthy"
    token_delay_s: float = 0.01
    in_flight: dict[int, str] = field(default_factory=dict)  # request number -> its prompt
    served: int = 0
    under_load: int = 0  # requests answered while another was in flight
    resets: int = 0
    url: str = ""

    def answer(self, prompt: str, flip: bool) -> list[tuple[str, float, str, float]]:
        """(token, logprob, runner-up, its logprob) per position."""
        tag = TAG.search(prompt)
        digest = hashlib.sha256(prompt.encode()).digest()
        out = []
        for i in range(24):
            word, runner = WORDS[digest[i] % len(WORDS)], WORDS[(digest[i] + 1) % len(WORDS)]
            if i == 0 and tag:
                word = tag.group(0)
            tie = i % NEAR_TIE_EVERY == NEAR_TIE_EVERY - 1
            margin = NEAR_TIE if tie else CONFIDENT
            if tie and flip:
                word, runner = runner, word
            out.append((" " + word, -0.05, " " + runner, -0.05 - margin))
        return out

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = "\n".join(str(m.get("content")) for m in body["messages"])
        self.served += 1
        number = self.served
        others = [p for n, p in self.in_flight.items() if n != number]
        self.in_flight[number] = prompt
        loaded = bool(others)
        self.under_load += loaded
        try:
            return await self._stream(request, body, prompt, others[-1] if others else None, loaded)
        finally:
            del self.in_flight[number]

    async def _stream(self, request: web.Request, body: dict, prompt: str, other: str | None,
                      loaded: bool) -> web.StreamResponse:
        mode = self.mode
        source = other if loaded and mode == "swap" and other is not None else prompt
        tokens = self.answer(source, flip=loaded and mode in ("flip", "no_logprobs"))
        n = min(int(body.get("max_tokens") or 16), len(tokens))
        tokens = tokens[:n]
        if loaded and mode == "garbled":
            tokens = tokens[:1] + [(" !", -0.01, " ?", -6.0)] * (n - 1)
        if loaded and mode == "fffd":
            tokens[1] = (" \ufffd", -0.01, " ?", -6.0)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for token, logprob, runner, runner_logprob in tokens:
            await asyncio.sleep(self.token_delay_s)
            text = "" if loaded and mode == "empty" else token
            listed = None
            if body.get("logprobs") and mode != "no_logprobs":
                top = [{"token": token, "logprob": logprob}, {"token": runner, "logprob": runner_logprob}]
                listed = {"content": [{"token": token, "logprob": logprob, "top_logprobs": top}]}
            await response.write(_event({"choices": [{"index": 0, "delta": {"content": text}, "logprobs": listed,
                                                      "finish_reason": None}]}))
        await response.write(_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        await response.write(_event({"choices": [], "usage": {"prompt_tokens": len(prompt.split()),
                                                              "completion_tokens": n}}))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def flush(self, request: web.Request) -> web.Response:
        """SGLang's prefix-cache reset."""
        self.resets += 1
        return web.Response(status=200)

    @contextlib.contextmanager
    def running(self) -> Iterator[AnswerServer]:
        assert self.mode in MODES, self.mode
        app = chat_app("answers", self.chat, web.post("/flush_cache", self.flush))
        with serving(app) as self.url:
            yield self


def _event(payload: dict) -> bytes:
    return chunk_event(payload, "answers")
