"""The payloads the simulated engine answers with, per API, shaped like vLLM's: chat and completions chunks ending
in `data: [DONE]`; OpenAI Responses' typed events ending in response.completed; Anthropic-style Messages events
(message_start, content blocks, message_delta, message_stop). Reasoning tokens, when the engine writes them
first, go where each API puts them: `delta.reasoning`, `response.reasoning_text.delta`, a thinking block.

A shape turns the engine's events into SSE events: (event name or None, JSON object or "[DONE]").
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from loadrepro.sim.protocol import error_body
from loadrepro.sim.replies import Choice
from loadrepro.sim.steps import Finished

Event = tuple[str | None, dict[str, Any] | str]


def sse(event: Event) -> str:
    name, payload = event
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return (f"event: {name}\n" if name else "") + f"data: {data}\n\n"


def logprob_entry(choice: Choice, top: int) -> dict[str, Any]:
    """One position's logprobs as chat completions give them: the token, and the `top` best (it among them)."""
    best = [(choice.text, choice.logprob), (choice.runner_text, choice.runner_logprob)][:top]
    return {"token": choice.text, "logprob": choice.logprob, "bytes": list(choice.text.encode()),
            "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in best]}


def _completions_logprobs(entry: dict[str, Any], offset: int) -> dict[str, Any]:
    return {"tokens": [entry["token"]], "token_logprobs": [entry["logprob"]],
            "top_logprobs": [{t["token"]: t["logprob"] for t in entry["top_logprobs"]}], "text_offset": [offset]}


def openai_usage(finished: Finished) -> dict[str, Any]:
    return {"prompt_tokens": finished.prompt_tokens, "completion_tokens": finished.completion_tokens,
            "total_tokens": finished.prompt_tokens + finished.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": finished.cached_tokens}}


@dataclass(slots=True)
class ChatShape:
    """Chat completions (`chat`) or completions chunks, vLLM's way."""

    chat: bool
    request_id: int
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    def _envelope(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        prefix = "chatcmpl" if self.chat else "cmpl"
        return {"id": f"{prefix}-{self.request_id}", "object": kind, "created": self.created,
                "model": self.model, "choices": choices}

    offset: int = 0  # characters of text written so far (completions' text_offset)

    def _choice(self, text: str | None, finish_reason: str | None, first: bool = False,
                reasoning: bool = False, logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
        if not self.chat:
            listed = _completions_logprobs(logprobs, self.offset) if logprobs else None
            return {"index": 0, "text": text or "", "logprobs": listed, "finish_reason": finish_reason}
        delta: dict[str, Any] = {} if text is None else {"reasoning" if reasoning else "content": text}
        if first:
            delta = {"role": "assistant", **delta}
        listed = {"content": [logprobs]} if logprobs else None
        return {"index": 0, "delta": delta, "logprobs": listed, "finish_reason": finish_reason}

    def opening(self, prompt_tokens: int) -> list[Event]:
        return []

    def token(self, text: str, first: bool, reasoning: bool, logprobs: dict[str, Any] | None = None) -> list[Event]:
        event = (None, self._envelope([self._choice(text, None, first, reasoning, logprobs)], chunk=True))
        self.offset += len(text)
        return [event]

    def closing(self, finished: Finished, include_usage: bool) -> list[Event]:
        events: list[Event] = [(None, self._envelope([self._choice(None if self.chat else "",
                                                                   finished.finish_reason)], chunk=True))]
        if include_usage:
            events.append((None, {**self._envelope([], chunk=True), "usage": openai_usage(finished)}))
        return events + [(None, "[DONE]")]

    def failure(self, status: int, message: str) -> list[Event]:
        return [(None, error_body(status, message)), (None, "[DONE]")]

    def whole(self, text: str, reasoning: str, finished: Finished) -> dict[str, Any]:
        if self.chat:
            message = {"role": "assistant", "content": text, **({"reasoning": reasoning} if reasoning else {})}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finished.finish_reason}
        else:
            choice = {"index": 0, "text": reasoning + text, "logprobs": None, "finish_reason": finished.finish_reason}
        return {**self._envelope([choice], chunk=False), "usage": openai_usage(finished)}


@dataclass(slots=True)
class ResponsesShape:
    """OpenAI Responses events, vLLM's way: no [DONE]; the last event carries the whole response and its usage."""

    request_id: int
    model: str
    created: int = field(default_factory=lambda: int(time.time()))
    sequence: int = 0
    reasoning_tokens: int = 0

    def _event(self, kind: str, **fields: Any) -> Event:
        self.sequence += 1
        return kind, {"type": kind, "sequence_number": self.sequence - 1, **fields}

    def _response(self, status: str, **fields: Any) -> dict[str, Any]:
        return {"id": f"resp_{self.request_id}", "object": "response", "created_at": self.created,
                "model": self.model, "status": status, "output": [], **fields}

    def opening(self, prompt_tokens: int) -> list[Event]:
        return [self._event("response.created", response=self._response("in_progress")),
                self._event("response.in_progress", response=self._response("in_progress"))]

    def token(self, text: str, first: bool, reasoning: bool, logprobs: dict[str, Any] | None = None) -> list[Event]:
        kind = "response.reasoning_text.delta" if reasoning else "response.output_text.delta"
        self.reasoning_tokens += reasoning
        item = f"{'rs' if reasoning else 'msg'}_{self.request_id}"
        listed = {"logprobs": [logprobs]} if logprobs is not None and not reasoning else {}
        return [self._event(kind, item_id=item, output_index=0, content_index=0, delta=text, **listed)]

    def _usage(self, finished: Finished) -> dict[str, Any]:
        return {"input_tokens": finished.prompt_tokens,
                "input_tokens_details": {"cached_tokens": finished.cached_tokens},
                "output_tokens": finished.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
                "total_tokens": finished.prompt_tokens + finished.completion_tokens}

    def _final(self, finished: Finished, text: str = "") -> dict[str, Any]:
        incomplete = finished.finish_reason == "length"
        output = [{"type": "message", "id": f"msg_{self.request_id}", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}]
        return self._response("incomplete" if incomplete else "completed", output=output,
                              incomplete_details={"reason": "max_output_tokens"} if incomplete else None,
                              usage=self._usage(finished))

    def closing(self, finished: Finished, include_usage: bool) -> list[Event]:
        return [self._event("response.completed", response=self._final(finished))]

    def failure(self, status: int, message: str) -> list[Event]:
        error = {"code": "server_error", "message": message}
        return [self._event("response.failed", response=self._response("failed", error=error))]

    def whole(self, text: str, reasoning: str, finished: Finished) -> dict[str, Any]:
        self.reasoning_tokens = len(reasoning.split())  # each of the simulated engine's tokens is one word
        return self._final(finished, text)


_STOP_REASONS = {"length": "max_tokens", "stop": "end_turn"}


@dataclass(slots=True)
class MessagesShape:
    """Anthropic Messages events, vLLM's way: usage in message_start and message_delta, cached tokens apart."""

    request_id: int
    model: str
    block: str | None = None  # the open content block's type: "thinking" or "text"
    index: int = -1

    def _message(self, **fields: Any) -> dict[str, Any]:
        return {"id": f"msg_{self.request_id}", "type": "message", "role": "assistant", "model": self.model,
                "stop_sequence": None, **fields}

    def opening(self, prompt_tokens: int) -> list[Event]:
        usage = {"input_tokens": prompt_tokens, "output_tokens": 0}
        return [("message_start", {"type": "message_start",
                                   "message": self._message(content=[], stop_reason=None, usage=usage)}),
                ("ping", {"type": "ping"})]

    def _stop_block(self) -> list[Event]:
        if self.block is None:
            return []
        self.block = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def token(self, text: str, first: bool, reasoning: bool, logprobs: dict[str, Any] | None = None) -> list[Event]:
        kind = "thinking" if reasoning else "text"
        events: list[Event] = []
        if self.block != kind:
            events += self._stop_block()
            self.block, self.index = kind, self.index + 1
            events.append(("content_block_start", {"type": "content_block_start", "index": self.index,
                                                   "content_block": {"type": kind, kind: ""}}))
        delta = {"type": "thinking_delta", "thinking": text} if reasoning else {"type": "text_delta", "text": text}
        return events + [("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})]

    def _usage(self, finished: Finished) -> dict[str, Any]:
        return {"input_tokens": finished.prompt_tokens - finished.cached_tokens,
                "cache_read_input_tokens": finished.cached_tokens, "output_tokens": finished.completion_tokens}

    def closing(self, finished: Finished, include_usage: bool) -> list[Event]:
        stop = _STOP_REASONS.get(finished.finish_reason, finished.finish_reason)
        return [*self._stop_block(),
                ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": self._usage(finished)}),
                ("message_stop", {"type": "message_stop"})]

    def failure(self, status: int, message: str) -> list[Event]:
        return [("error", error_body(status, message, anthropic=True))]

    def whole(self, text: str, reasoning: str, finished: Finished) -> dict[str, Any]:
        content = ([{"type": "thinking", "thinking": reasoning}] if reasoning else []) + [
            {"type": "text", "text": text}]
        return self._message(content=content, stop_reason=_STOP_REASONS.get(finished.finish_reason),
                             usage=self._usage(finished))


Shape = ChatShape | ResponsesShape | MessagesShape
