"""Structured answers: what a request asks for ([workload] structured_format) as body keys, how a request's body
says which it asked for, and whether an answer is what it asked for. Pure."""

from __future__ import annotations

import re
from typing import Any

import orjson

from loadrepro.config.workload_spec import UNCHECKED_FORMATS, StructuredFormat, WorkloadSpec

# The answer a JSON request asks for: an object of one boolean, which any model can finish in a few tokens under a
# grammar (a longer schema would be cut at a short max_tokens and prove nothing).
ANSWER_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                 "additionalProperties": False}
RESPONSE_FORMATS: dict[str, dict[str, Any]] = {
    "json_schema": {"type": "json_schema", "json_schema": {"name": "loadrepro_answer", "schema": ANSWER_SCHEMA,
                                                           "strict": True}},
    "json_object": {"type": "json_object"},
}
# The tool a `tools` request defines and names in tool_choice: its arguments are the JSON answer's object.
TOOL_NAME = "record_verdict"
TOOLS = [{"type": "function", "function": {"name": TOOL_NAME, "description": "Record whether the records agree.",
                                           "parameters": ANSWER_SCHEMA}}]
WORDS = 200  # of an answer that is not what it asked for, kept as evidence


def asking(spec: WorkloadSpec, kind: StructuredFormat) -> dict[str, Any]:
    """The body keys that ask for `kind`."""
    if kind in RESPONSE_FORMATS:
        return {"response_format": RESPONSE_FORMATS[kind]}
    if kind == "tools":
        return {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}}}
    value: Any = {"choice": list(spec.structured_choices), "regex": spec.structured_regex,
                  "grammar": spec.structured_grammar}[kind]
    return {"structured_outputs": {kind: value}}


def asked(body: dict[str, Any]) -> str | None:
    """What a request's body asks for (json_schema, json_object, choice, regex, grammar, json, tools: a call of a
    tool, or "other": a kind loadrepro does not know, not checked), or None: a free answer (response_format "text"
    is one, and tools the model may or may not call: tool_choice auto or none)."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") != "text":
        kind = str(response_format.get("type"))
        return kind if kind in RESPONSE_FORMATS else "other"
    choice = body.get("tool_choice")
    if body.get("tools") and (choice == "required" or isinstance(choice, dict)):
        return "tools"
    outputs = body.get("structured_outputs")
    if isinstance(outputs, dict):
        return next((k for k in ("choice", "regex", "grammar", "json") if outputs.get(k) is not None), "other")
    return None


def mismatch(body: dict[str, Any], text: str, finish_reason: str | None, arguments: str | None = None) -> str | None:
    """An answer (its content, and its first tool call's `arguments`) that ended on its own and is not what its
    request asked for: its first words. None when it is, when it was cut at max_tokens (which says nothing of the
    engine's grammar), or when it cannot be checked."""
    kind = asked(body)
    if finish_reason == "length" or kind is None or kind in UNCHECKED_FORMATS:
        return None
    if kind == "tools":
        if arguments is None:
            return f"(no tool call) {text}"[:WORDS]
        return None if isinstance(_json(arguments), dict) else (f"(tool call arguments) {arguments}"[:WORDS])
    if kind == "choice":
        ok = text in body["structured_outputs"]["choice"]
    elif kind == "regex":
        ok = re.fullmatch(body["structured_outputs"]["regex"], text) is not None
    elif kind == "json":  # a schema of the request's own (a trace's): any JSON value may be what it asked for
        ok = _json(text) is not _INVALID
    else:  # a response_format: json_schema (ours asks for an object) or json_object
        ok = isinstance(_json(text), dict)
    return None if ok else (text[:WORDS] or "(no content)")


_INVALID = object()


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return _INVALID
