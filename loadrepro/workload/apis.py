"""The four generation APIs a target may serve, as a client writes to them: the path, the request body each wants,
and how each reports usage. Pure.

A workload is planned once, in chat form (`messages`, `max_tokens`, ...) or as a bare `prompt` for completions;
`wire_body` writes it the way the chosen API takes it, so the same seeded conversations can go to
`/v1/chat/completions`, OpenAI's `/v1/responses` or the Anthropic-style `/v1/messages`. vLLM and SGLang render
all three through the model's chat template, so one calibration counts for them all.
"""

from __future__ import annotations

from typing import Any, get_args

from loadrepro.config.profile import Api

APIS: tuple[Api, ...] = get_args(Api)
PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions",
                         "responses": "/v1/responses", "messages": "/v1/messages"}

# Keys of a planned chat body that the other APIs name differently or do not take.
_CHAT_ONLY = frozenset({"messages", "max_tokens", "max_completion_tokens", "stream_options", "logprobs"})
_MESSAGES_LACK = frozenset({"seed", "top_logprobs"})  # Anthropic's Messages API has no seed and no logprobs
RESPONSES_LOGPROBS = "message.output_text.logprobs"  # what a Responses request must `include` to get logprobs


def deterministic(api: str, body: dict[str, Any], seed: int, top: int) -> dict[str, Any]:
    """A planned body that asks for the same answer every time, with its evidence ([verify]): temperature 0, a
    fixed seed, and the top `top` logprobs at each position (completions: `logprobs: top`; chat form:
    `logprobs: true, top_logprobs: top`, which wire_body renames for the Responses API and drops for Messages)."""
    asked: dict[str, Any] = {"logprobs": top} if not chat_form(api) else {"logprobs": True, "top_logprobs": top}
    return {**body, "temperature": 0, "seed": seed, **asked}


def chat_form(api: str) -> bool:
    """Whether the workload is planned as messages (every API but completions)."""
    return api != "completions"


def wire_body(api: str, body: dict[str, Any], model: str | None) -> dict[str, Any]:
    """The request body as `api` takes it, from a planned one (chat form, or `prompt` for completions); `model`
    None leaves the model out (a bundle's replay fills it in)."""
    named = {"model": model} if model is not None else {}
    match api:
        case "chat" | "completions":
            return {**body, **named}
        case "responses":
            rest = {k: v for k, v in body.items() if k not in _CHAT_ONLY}
            if "top_logprobs" in rest:
                rest["include"] = [RESPONSES_LOGPROBS]
            # store: false, or the server keeps every response of the run in memory for later retrieval.
            return {**named, "input": body["messages"], "max_output_tokens": body["max_tokens"], **rest,
                    "store": False}
        case "messages":
            rest = {k: v for k, v in body.items() if k not in _CHAT_ONLY | _MESSAGES_LACK}
            system = [m["content"] for m in body["messages"] if m.get("role") == "system"]
            turns = [m for m in body["messages"] if m.get("role") != "system"]
            return {**named, **({"system": "\n\n".join(system)} if system else {}), "messages": turns,
                    "max_tokens": body["max_tokens"], **rest}
    raise ValueError(f"unknown api {api!r}")


def count_of(value: Any) -> int | None:
    """A token count from a usage object: an int, or None for anything else a target put there."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def openai_usage(api: str, usage: Any) -> dict[str, Any]:
    """A usage object of any API as chat completions shape it: `prompt_tokens` (all of the prompt, cached or
    not), `completion_tokens` and `prompt_tokens_details.cached_tokens` (left out when the target said nothing)."""
    if not isinstance(usage, dict):
        return {}
    if api in ("chat", "completions"):
        return usage
    out: dict[str, Any] = {}
    if api == "responses":
        details = usage.get("input_tokens_details")
        cached = count_of(details.get("cached_tokens")) if isinstance(details, dict) else None
        prompt = count_of(usage.get("input_tokens"))
    else:
        # Anthropic counts cache reads and writes apart from input_tokens; together they are the prompt.
        cached = count_of(usage.get("cache_read_input_tokens"))
        parts = [count_of(usage.get(k)) for k in ("input_tokens", "cache_read_input_tokens",
                                              "cache_creation_input_tokens")]
        prompt = sum(p or 0 for p in parts) if parts[0] is not None else None
    if prompt is not None:
        out["prompt_tokens"] = prompt
    if (completion := count_of(usage.get("output_tokens"))) is not None:
        out["completion_tokens"] = completion
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out
