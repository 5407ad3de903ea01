"""The request bodies the simulated engine takes, shaped like vLLM's: chat and completions, OpenAI Responses and
Anthropic-style Messages; and its error bodies. The payloads it answers with are in shapes.py."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loadrepro.sim.tokenizer import message_text, render_chat


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
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def logprobs_wanted(self) -> int | None:
        """Alternatives listed per position, or None when logprobs were not asked for."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionBody(_Generation):
    prompt: str | list[str]
    logprobs: int | None = Field(None, ge=0, le=20)

    def logprobs_wanted(self) -> int | None:
        return self.logprobs

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens


class ResponsesBody(BaseModel):
    """OpenAI Responses: `input` is a string or a list of messages; `instructions` a system message."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = None
    stream: bool = False
    ignore_eos: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    include: list[str] | None = None

    def logprobs_wanted(self) -> int | None:
        return (self.top_logprobs or 0) if "message.output_text.logprobs" in (self.include or []) else None

    def prompt(self) -> str:
        messages = [{"role": "system", "content": self.instructions}] if self.instructions else []
        if isinstance(self.input, str):
            messages.append({"role": "user", "content": self.input})
        else:
            messages += [{"role": m.get("role", "user"), "content": _input_text(m.get("content"))} for m in self.input]
        return render_chat(messages)

    def requested_max_tokens(self) -> int | None:
        return self.max_output_tokens


def _input_text(content: object) -> str:
    """A Responses message's content: a string, or parts of which `input_text`/`output_text` ones count."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text"))
    return message_text(content)


class MessagesBody(BaseModel):
    """Anthropic Messages: `system` apart from `messages`, `max_tokens` required."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[ChatMessage]
    system: str | list[dict[str, Any]] | None = None
    max_tokens: int
    stream: bool = False
    ignore_eos: bool = False

    def logprobs_wanted(self) -> int | None:
        return None  # the Messages API has no logprobs

    def prompt(self) -> str:
        system = [{"role": "system", "content": message_text(self.system)}] if self.system else []
        return render_chat(system + [m.model_dump() for m in self.messages])

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


def error_body(status: int, message: str, code: str | None = None, flat: bool = False,
               anthropic: bool = False) -> dict[str, Any]:
    """vLLM's nested error object; `flat` gives TensorRT-LLM's `{"object": "error", ...}` shape, `anthropic` the
    Messages API's `{"type": "error", "error": {"type", "message"}}`."""
    if anthropic:
        kind = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error",
                503: "overloaded_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(
        status, "InternalServerError")
    inner = {"message": message, "type": kind, "param": None, "code": code or status}
    return {"object": "error", **inner} if flat else {"error": inner}
