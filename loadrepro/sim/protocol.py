"""OpenAI-compatible request bodies and response payloads of the simulated engine, shaped like vLLM's."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from loadrepro.sim.scheduler import Finished


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class _Generation(BaseModel):
    # Clients send many optional OpenAI fields; the simulated engine ignores those it does not model.
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    max_tokens: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    n: int = 1

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatBody(_Generation):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionBody(_Generation):
    prompt: str | list[str]

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens


class TokenizeBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True


def validation_message(exc: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]]
    return "; ".join(parts)


def error_body(status: int, message: str, code: str | None = None, flat: bool = False) -> dict[str, Any]:
    """vLLM's nested error object; `flat` gives TensorRT-LLM's `{"object": "error", ...}` shape."""
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(
        status, "InternalServerError")
    inner = {"message": message, "type": kind, "param": None, "code": code or status}
    return {"object": "error", **inner} if flat else {"error": inner}


def usage(finished: Finished) -> dict[str, Any]:
    return {
        "prompt_tokens": finished.prompt_tokens,
        "completion_tokens": finished.completion_tokens,
        "total_tokens": finished.prompt_tokens + finished.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": finished.cached_tokens},
    }


def sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


@dataclass(frozen=True, slots=True)
class Shape:
    """Builds the payloads of one response, chat or completions."""

    chat: bool
    request_id: int
    model: str
    created: int

    @classmethod
    def new(cls, chat: bool, request_id: int, model: str) -> Shape:
        return cls(chat, request_id, model, int(time.time()))

    def _envelope(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        prefix = "chatcmpl" if self.chat else "cmpl"
        return {"id": f"{prefix}-{self.request_id}", "object": kind, "created": self.created,
                "model": self.model, "choices": choices}

    def _choice(self, text: str | None, finish_reason: str | None, first: bool = False) -> dict[str, Any]:
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        delta: dict[str, Any] = {} if text is None else {"content": text}
        if first:
            delta = {"role": "assistant", **delta}
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}

    def token_chunk(self, text: str, first: bool) -> dict[str, Any]:
        return self._envelope([self._choice(text, None, first)], chunk=True)

    def final_chunk(self, finished: Finished) -> dict[str, Any]:
        return self._envelope([self._choice(None if self.chat else "", finished.finish_reason)], chunk=True)

    def usage_chunk(self, finished: Finished) -> dict[str, Any]:
        return {**self._envelope([], chunk=True), "usage": usage(finished)}

    def whole(self, text: str, finished: Finished) -> dict[str, Any]:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": finished.finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finished.finish_reason}
        return {**self._envelope([choice], chunk=False), "usage": usage(finished)}
