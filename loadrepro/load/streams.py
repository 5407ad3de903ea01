"""What the events of each API's stream say, as one request's Attempt: a token (content, or another kind), the
finish, usage, an error, the end. Pure: no I/O, no clock; the client times what these report.

Tokens of every kind are tokens: reasoning (`reasoning_content`, vLLM's newer `reasoning`, a Responses
`reasoning_text` delta, a Messages `thinking_delta`) and tool-call arguments leave the engine as generated tokens,
so the first of any kind is the first token; content is also timed apart (time to first content token).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadrepro.load.answer_text import AnswerParts, chat_logprobs, completions_logprobs
from loadrepro.workload.apis import openai_usage

NONE, TOKEN, CONTENT = 0, 1, 2  # what one event carried


class ProtocolViolation(Exception):
    """The target answered with something that is not the API's JSON or SSE."""


@dataclass(slots=True)
class Attempt:
    """What one attempt of a request has seen so far; becomes the RequestRecord."""

    sent_ns: int | None = None
    first_byte_ns: int | None = None
    first_token_ns: int | None = None
    first_content_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)
    status: int | None = None
    finish_reason: Any = None
    usage: dict[str, Any] = field(default_factory=dict)  # in chat completions' shape (workload.apis.openai_usage)
    error: str | None = None
    error_code: int | None = None
    done: bool = False  # the API's end-of-stream mark: [DONE], response.completed, message_stop
    retry_after_s: float | None = None
    reused: bool = False  # the connection came from the pool (the transport's tracing says so)
    reconnects: int = 0  # times the transport sent it again because a pooled connection was closed
    last_byte_ns: int = 0
    silence: str | None = None  # why the watchdog ended the request: "stalled" or "ttft"
    answer: AnswerParts | None = None  # [verify] on: the answer's evidence, read as it comes
    began: Callable[[], None] | None = None  # told at the first token (an abort burst cancels answers under way)
    replica: int = 0  # the replica it was sent to, whose progress its tokens mark ([target] replicas)
    timings: dict[str, Any] = field(default_factory=dict)  # llama.cpp's, in its last chunk: drafts among them

    def first_token(self, now: int) -> None:
        if self.first_token_ns is None:
            self.first_token_ns = now
            if self.began is not None:
                self.began()


def _not_object(value: Any, what: str) -> ProtocolViolation:
    return ProtocolViolation(f"{what} that is not a JSON object: {str(value)[:200]!r}")


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _not_object(value, what)
    return value


def _optional_object(value: Any) -> dict[str, Any]:
    """A field that may be absent or not an object (a failure's error, a delta): what it holds, or nothing."""
    return value if isinstance(value, dict) else {}


def error_code(value: Any) -> int | None:
    """An error's code as a number: gateways pass engines' codes on as strings ("500", "429")."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def error_of(payload: Any) -> tuple[str, int | None] | None:
    """The message and code of an error object in any engine's or API's shape, else None."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):  # OpenAI, vLLM, llama.cpp; Anthropic's {"type": "error", "error": {...}}
        code = error_code(error.get("code")) or _ANTHROPIC_CODES.get(str(error.get("type")))
        return str(error.get("message", error)), code
    if error:  # a bare string
        return str(error), error_code(payload.get("code"))
    if payload.get("object") == "error" or payload.get("type") == "error":  # TensorRT-LLM, SGLang; Responses
        return str(payload.get("message", payload)), error_code(payload.get("code"))
    return None


# Anthropic's error types that say "busy, come back later", as the HTTP codes they come with.
_ANTHROPIC_CODES = {"overloaded_error": 529, "rate_limit_error": 429}


def _tool_call_token(calls: Any) -> bool:
    if not isinstance(calls, list):
        return False
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and (function.get("arguments") or function.get("name")):
            return True
    return False


def _choices(payload: dict[str, Any], a: Attempt, text_of: Callable[[dict[str, Any]], int],
             answer_of: Callable[[dict[str, Any], AnswerParts], None]) -> int:
    # Read once per token: the checks are written out here rather than called (_object, the token kind's max), which
    # was a third of this function's time.
    if usage := payload.get("usage"):
        a.usage = _object(usage, "usage")
    if isinstance(timings := payload.get("timings"), dict):
        a.timings = timings
    choices = payload.get("choices") or []
    if not isinstance(choices, list):
        raise ProtocolViolation(f"`choices` is not a list: {str(choices)[:200]!r}")
    seen = NONE
    for choice in choices:
        if not isinstance(choice, dict):
            raise _not_object(choice, "a choice")
        if (kind := text_of(choice)) > seen:
            seen = kind
        if a.answer is not None:
            answer_of(choice, a.answer)
        if reason := choice.get("finish_reason"):
            a.finish_reason = reason
    return seen


def _chat_answer(choice: dict[str, Any], parts: AnswerParts) -> None:
    delta = choice.get("delta") or choice.get("message") or {}
    if isinstance(delta, dict) and isinstance(delta.get("content"), str):
        parts.content(delta["content"])
    if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), list):
        for call in delta["tool_calls"]:  # the first call's arguments, in the pieces a stream gives them
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str) and call.get("index", 0) == 0:
                parts.tool(function["arguments"])
    chat_logprobs(choice.get("logprobs"), parts)


def _text_answer(choice: dict[str, Any], parts: AnswerParts) -> None:
    if isinstance(choice.get("text"), str):
        parts.content(choice["text"])
    completions_logprobs(choice.get("logprobs"), parts)


def _chat_choice(choice: dict[str, Any]) -> int:
    if not (delta := choice.get("delta")):
        return NONE
    if not isinstance(delta, dict):
        raise _not_object(delta, "a delta")
    if delta.get("content"):
        return CONTENT
    if delta.get("reasoning_content") or delta.get("reasoning") or _tool_call_token(delta.get("tool_calls")):
        return TOKEN
    return NONE


def _text_choice(choice: dict[str, Any]) -> int:
    return CONTENT if choice.get("text") else NONE


def chat_event(payload: dict[str, Any], a: Attempt) -> int:
    return _choices(payload, a, _chat_choice, _chat_answer)


def completions_event(payload: dict[str, Any], a: Attempt) -> int:
    return _choices(payload, a, _text_choice, _text_answer)


_RESPONSES_TOKENS = {"response.reasoning_text.delta", "response.reasoning_summary_text.delta",
                     "response.function_call_arguments.delta", "response.refusal.delta"}


def responses_event(payload: dict[str, Any], a: Attempt) -> int:
    """OpenAI Responses: typed events; the stream ends with response.completed (or .incomplete), no [DONE]."""
    kind = payload.get("type")
    if kind == "response.output_text.delta":
        if a.answer is not None and isinstance(payload.get("delta"), str):
            a.answer.content(payload["delta"])
            chat_logprobs(payload.get("logprobs"), a.answer)
        return CONTENT if payload.get("delta") else NONE
    if kind in _RESPONSES_TOKENS:
        return TOKEN if payload.get("delta") else NONE
    if kind in ("response.completed", "response.incomplete"):
        response = _object(payload.get("response"), "a response")
        a.usage = openai_usage("responses", response.get("usage"))
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        a.finish_reason = reason or response.get("status") or kind.rpartition(".")[2]
        a.done = True
    elif kind == "response.failed":
        response = _optional_object(payload.get("response"))
        error = _optional_object(response.get("error"))
        a.error = str(error.get("message") or "the response failed")
        a.error_code = error_code(error.get("code"))
        a.done = True
    return NONE


def messages_event(payload: dict[str, Any], a: Attempt) -> int:
    """Anthropic Messages: message_start (usage), content_block_delta (text, thinking, tool input), message_delta
    (stop_reason, usage), message_stop."""
    kind = payload.get("type")
    if kind == "content_block_delta":
        delta = _object(payload.get("delta") or {}, "a delta")
        if delta.get("type") == "text_delta":
            if a.answer is not None and isinstance(delta.get("text"), str):
                a.answer.content(delta["text"])
            return CONTENT if delta.get("text") else NONE
        return TOKEN if delta.get("thinking") or delta.get("partial_json") else NONE
    if kind == "message_start":
        message = _object(payload.get("message") or {}, "a message")
        a.usage = openai_usage("messages", message.get("usage"))
    elif kind == "message_delta":
        delta = _optional_object(payload.get("delta"))
        if delta.get("stop_reason"):
            a.finish_reason = delta["stop_reason"]
        later = openai_usage("messages", payload.get("usage"))
        if not later.get("prompt_tokens"):  # Anthropic sends only output tokens here: message_start's prompt stands
            later.pop("prompt_tokens", None)
        a.usage = {**a.usage, **later}
    elif kind == "message_stop":
        a.done = True
    return NONE


READERS: dict[str, Callable[[dict[str, Any], Attempt], int]] = {
    "chat": chat_event, "completions": completions_event, "responses": responses_event, "messages": messages_event}

# How each API marks the end of a stream, for the words of an `ok` stream that lacked it.
END_MARKS = {"chat": "data: [DONE]", "completions": "data: [DONE]", "responses": "response.completed",
             "messages": "message_stop"}


def whole_answer(api: str, payload: dict[str, Any], a: Attempt) -> None:
    """A response that was not streamed: its usage and finish reason (ProtocolViolation when it has neither
    choices nor the API's own shape)."""
    match api:
        case "chat" | "completions":
            choices = payload.get("choices")
            if not choices or not isinstance(choices, list):
                raise ProtocolViolation("a response without choices")
            a.usage = _object(payload.get("usage") or {}, "usage")
            a.timings = payload["timings"] if isinstance(payload.get("timings"), dict) else {}
            a.finish_reason = _object(choices[0], "a choice").get("finish_reason")
            if a.answer is not None:
                (_chat_answer if api == "chat" else _text_answer)(choices[0], a.answer)
        case "responses":
            if payload.get("object") != "response":
                raise ProtocolViolation("a response that is not a Responses API response object")
            a.usage = openai_usage(api, payload.get("usage"))
            if a.answer is not None:
                _responses_answer(payload, a.answer)
            details = payload.get("incomplete_details")
            a.finish_reason = (details.get("reason") if isinstance(details, dict) else None) or payload.get("status")
        case "messages":
            if payload.get("type") != "message":
                raise ProtocolViolation("a response that is not a Messages API message")
            a.usage = openai_usage(api, payload.get("usage"))
            a.finish_reason = payload.get("stop_reason")
            blocks = payload.get("content")
            for block in blocks if isinstance(blocks, list) else []:
                if a.answer is not None and isinstance(block, dict) and block.get("type") == "text" and \
                        isinstance(block.get("text"), str):
                    a.answer.content(block["text"])
    a.done = True


def _responses_answer(payload: dict[str, Any], parts: AnswerParts) -> None:
    """A whole Responses answer: the output_text parts of its message items, with their logprobs."""
    for item in payload.get("output") or []:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for part in item.get("content") or []:
            if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                parts.content(part["text"])
                chat_logprobs(part.get("logprobs"), parts)
