"""The trace formats users bring, each read as a stream into one kind of row, with errors that name the file, the
line (or row) and the field.

Token-count formats (mooncake, bailian, azure, burstgpt) give lengths and, where they have them, hash ids of token
blocks; text formats (sharegpt, openai-log) give the messages themselves. Every row says which session it belongs
to: a row that continues a conversation (Bailian's parent_chat_id, a Mooncake session_id, a ShareGPT
conversation's later turns, an OpenAI log request whose messages extend an earlier one's) carries the session of
the turn it continues, and follows it in the file.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import orjson

from loadrepro.config.workload_spec import TraceFormat
from loadrepro.errors import TraceError
from loadrepro.workload.agent_traces import read_weka, weka_block_size
from loadrepro.workload.dag_traces import read_dag
from loadrepro.workload.trace_rows import (
    Message,
    Skipped,
    TraceRow,
    fail,
    gzipped,
    jsonl,
    length,
    number,
    open_trace,
    read_hash_ids,
)

FORMATS: tuple[TraceFormat, ...] = get_args(TraceFormat)
TEXT_FORMATS = frozenset({"sharegpt", "openai-log", "dag"})
BLOCK_TOKENS: dict[str, int] = {"mooncake": 512, "bailian": 16}  # tokens per hash id, as each format defines it


_FRACTION = re.compile(r"(\.\d{6})\d+")  # Azure's datetimes have 7 fractional digits; Python reads 6


def _timestamp(value: Any, where: str, key: str) -> float:
    """Seconds: a number as it is, or an ISO 8601 datetime (UTC when it names no zone)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(_FRACTION.sub(r"\1", text.replace("Z", "+00:00")))
        except ValueError:
            raise fail(where, key, f"not a timestamp (seconds or ISO 8601): {value!r}") from None
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    raise fail(where, key, f"not a timestamp (seconds or ISO 8601): {value!r}")


def _csv(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    with open_trace(path) as handle:
        reader = csv.DictReader(handle)
        header = [name.strip() for name in reader.fieldnames or []]
        missing = [c for c in columns if c not in header]
        if missing:
            raise TraceError(f"{path}:1: {missing[0]}: missing column (the header has {', '.join(header) or 'none'})")
        reader.fieldnames = header
        for row in reader:
            yield f"{path}:{reader.line_num}", row


def _mooncake(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """{timestamp ms, input_length, output_length, hash_ids, session_id?, delay ms?}: a row of a session after its
    first may give a delay (think time) instead of a timestamp."""
    for where, data in jsonl(path):
        session = data.get("session_id")
        stamp, delay = number(data, "timestamp", where, optional=True), number(data, "delay", where, optional=True)
        if stamp is None and (session is None or delay is None):
            raise fail(where, "timestamp", "missing (only a turn that continues a session may give a delay instead)")
        if delay is not None and delay < 0:
            raise fail(where, "delay", f"negative: {delay}")
        yield TraceRow(where, None if stamp is None else stamp / 1000, length(data, "input_length", where),
                       length(data, "output_length", where), read_hash_ids(data, where),
                       None if session is None else f"s{session}", (delay or 0.0) / 1000)


def _bailian(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """{chat_id, parent_chat_id (-1: a first turn), timestamp s, input_length, output_length, type, turn,
    hash_ids}: a turn's session is its first turn's chat id, which must come earlier in the file."""
    roots: dict[int, int] = {}
    for where, data in jsonl(path):
        chat = length(data, "chat_id", where, least=-(1 << 62))
        parent = length(data, "parent_chat_id", where, least=-1)
        if parent == -1:
            root = chat
        elif parent in roots:
            root = roots[parent]
        else:
            raise fail(where, "parent_chat_id", f"{parent} is not the chat_id of an earlier line")
        roots[chat] = root
        yield TraceRow(where, number(data, "timestamp", where), length(data, "input_length", where),
                       length(data, "output_length", where), read_hash_ids(data, where), f"c{root}")


def _azure(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """CSV TIMESTAMP, ContextTokens, GeneratedTokens: independent requests, no prefix information."""
    for where, row in _csv(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        if length(row, "GeneratedTokens", where, least=0) == 0:
            skipped.add("requests that generated no token", where)
            continue
        yield TraceRow(where, _timestamp(row["TIMESTAMP"], where, "TIMESTAMP"), length(row, "ContextTokens", where),
                       length(row, "GeneratedTokens", where))


def _burstgpt(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """CSV Timestamp (s), Model, Request tokens, Response tokens, Total tokens, Log Type: a row with no response
    tokens is a request that failed in the log, left out."""
    for where, row in _csv(path, ("Timestamp", "Request tokens", "Response tokens")):
        if length(row, "Response tokens", where, least=0) == 0 or length(row, "Request tokens", where, least=0) == 0:
            skipped.add("failed requests (no request or response tokens)", where)
            continue
        yield TraceRow(where, _timestamp(row["Timestamp"], where, "Timestamp"), length(row, "Request tokens", where),
                       length(row, "Response tokens", where))


_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant",
          "model": "assistant", "assistant": "assistant", "system": "system"}


def _sharegpt(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """[{id, conversations: [{from, value}]}]: one request per user turn answered in the file, its history the
    recorded turns before it. No timestamps: conversations start as the load allows."""
    try:
        with open_trace(path) as handle:
            items = json.load(handle)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(items, list):
        raise TraceError(f"{path}: a ShareGPT file is a JSON list of conversations")
    for count, item in enumerate(items, 1):
        where = f"{path}: conversation {count}"
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise fail(where, "conversations", "missing or not a list")
        history: list[Message] = []
        session = f"g{count}"
        for t, turn in enumerate(turns, 1):
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise fail(f"{where} turn {t}", "value", "missing or not text")
            role = _ROLES.get(str(turn.get("from", "")).lower())
            if role is None:
                raise fail(f"{where} turn {t}", "from", f"unknown speaker {turn.get('from')!r}")
            if role == "assistant" and history and history[-1]["role"] == "user":
                yield TraceRow(f"{where} turn {t}", None, 0, 0, session=session, messages=tuple(history),
                               answer=turn["value"])
            history.append({"role": role, "content": turn["value"]})
        if history and history[-1]["role"] == "user":
            skipped.add("last user turns with no recorded answer", f"{where} turn {len(turns)}")


def message_prefixes(messages: list[Message] | tuple[Message, ...]) -> list[bytes]:
    """A digest of each leading run of messages (their roles and contents): equal digests, equal prefixes."""
    running, out = b"", []
    for message in messages:
        part = orjson.dumps({"role": message.get("role"), "content": message.get("content")},
                            option=orjson.OPT_SORT_KEYS)
        running = hashlib.blake2b(running + part, digest_size=16).digest()
        out.append(running)
    return out


def _openai_log(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """{timestamp (s or ISO 8601), body (a chat completions request), response? (with its usage)}, or a bare
    request body per line. A request whose messages start with all of an earlier request's continues it."""
    sessions: dict[bytes, str] = {}  # the digest of every earlier request's whole messages, to its session
    for where, data in jsonl(path):
        body = data.get("body", data.get("request", data))
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            raise fail(where, "body.messages", "missing, empty or not a list")
        messages = body["messages"]
        if not all(isinstance(m, dict) and "role" in m for m in messages):
            raise fail(where, "body.messages", "every message needs a role")
        response = data["response"] if isinstance(data.get("response"), dict) else {}
        usage = response["usage"] if isinstance(response.get("usage"), dict) else {}
        output = usage.get("completion_tokens") or body.get("max_completion_tokens") or body.get("max_tokens")
        if output is None:
            raise fail(where, "response.usage.completion_tokens", "missing, and the body sets no max_tokens")
        output_length = length({"output": output}, "output", where)
        stamp = data.get("timestamp", data.get("time", data.get("created")))
        digests = message_prefixes(messages)
        session = next((sessions[d] for d in reversed(digests[:-1]) if d in sessions), f"o{where}")
        sessions.setdefault(digests[-1], session)
        # The log's own prompt_tokens are another model's, maybe: a text row is counted in the target's tokens.
        yield TraceRow(where, None if stamp is None else _timestamp(stamp, where, "timestamp"), 0, output_length,
                       session=session, messages=tuple(messages))


READERS = {"mooncake": _mooncake, "bailian": _bailian, "azure": _azure, "burstgpt": _burstgpt,
           "sharegpt": _sharegpt, "openai-log": _openai_log, "weka": read_weka, "dag": read_dag}
WEKA_KEYS = ('"requests"', '"block_size"')  # an agent trace's, found in the head of a file of one pretty-printed


def format_block_tokens(trace_format: str, path: Path) -> int:
    """Tokens per hash id as the format defines it (an agent trace's file says; 0: the format has none)."""
    return weka_block_size(path) if trace_format == "weka" else BLOCK_TOKENS.get(trace_format, 0)


def detect(path: Path) -> tuple[TraceFormat, str]:
    """The format of a trace file from its content, and why."""
    fmt, why = _detect(path)
    return fmt, f"{why}, gzip-compressed" if gzipped(path) else why


def _detect(path: Path) -> tuple[TraceFormat, str]:
    with open_trace(path) as handle:
        head = handle.read(65536)
    text = head.lstrip()
    if not text:
        raise TraceError(f"trace {path} is empty")
    first_line = text.splitlines()[0]
    if all(key in head for key in WEKA_KEYS) and (first_line.strip() in ("{", "[") or '"requests"' in first_line):
        return "weka", "a WEKA agent trace (requests with hash ids, subagents)"
    if text.startswith("["):
        return "sharegpt", "a JSON list (ShareGPT conversations)"
    if not first_line.startswith("{"):
        header = [name.strip() for name in next(csv.reader([first_line]))]
        if "ContextTokens" in header:
            return "azure", "a CSV with ContextTokens (Azure LLM inference)"
        if "Request tokens" in header:
            return "burstgpt", "a CSV with Request tokens (BurstGPT)"
        raise TraceError(f"{path}:1: not a trace format loadrepro knows: a CSV needs the columns TIMESTAMP, "
                         "ContextTokens, GeneratedTokens (azure) or Timestamp, Request tokens, Response tokens "
                         f"(burstgpt); its header is {first_line[:200]!r}")
    try:
        data = orjson.loads(first_line)
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"{path}:1: not JSON: {exc}") from None
    keys = set(data) if isinstance(data, dict) else set()
    if "chat_id" in keys:
        return "bailian", "JSON lines with chat_id (Bailian)"
    if {"session_id", "turns"} <= keys:
        return "dag", "JSON lines of conversations with turns (AIPerf dag_jsonl)"
    if "input_length" in keys:
        return "mooncake", "JSON lines with input_length (Mooncake)"
    if keys & {"body", "request", "messages"}:
        return "openai-log", "JSON lines of OpenAI request bodies"
    raise TraceError(f"{path}:1: not a trace format loadrepro knows: JSON lines need input_length (mooncake), "
                     "chat_id (bailian), a request body with messages (openai-log), requests and block_size "
                     f"(weka) or session_id and turns (dag); found {sorted(keys)[:8]}")


def read_rows(path: str | Path, trace_format: str = "auto",
              skipped: Skipped | None = None) -> tuple[TraceFormat, Iterator[TraceRow]]:
    """The trace's format (detected for "auto") and its rows, read as they are needed."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file not found: {path}")
    chosen: TraceFormat = detect(path)[0] if trace_format == "auto" else trace_format  # type: ignore[assignment]
    if chosen not in READERS:
        raise TraceError(f"unknown trace format {trace_format!r}; known: auto, {', '.join(FORMATS)}")
    return chosen, READERS[chosen](path, skipped if skipped is not None else Skipped())
