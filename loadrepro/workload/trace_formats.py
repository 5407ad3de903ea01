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
import gzip
import hashlib
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import orjson

from loadrepro.config.workload_spec import TraceFormat
from loadrepro.errors import TraceError

FORMATS: tuple[TraceFormat, ...] = get_args(TraceFormat)
TEXT_FORMATS = frozenset({"sharegpt", "openai-log"})
BLOCK_TOKENS: dict[str, int] = {"mooncake": 512, "bailian": 16}  # tokens per hash id, as each format defines it
Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace, whatever its format."""

    where: str  # file:line (or file, conversation and turn), for the errors about it
    timestamp_s: float | None  # its recorded arrival, seconds (None: none recorded, sent when its turn comes)
    input_length: int  # prompt tokens the trace gives (0: a text row, counted from its messages)
    output_length: int  # output tokens (0: a text row whose recorded answer gives it)
    hash_ids: tuple[int, ...] = ()
    session: str | None = None  # the conversation it belongs to (None: a request of its own)
    delay_s: float = 0.0  # think time after the previous turn of its session answered
    messages: tuple[Message, ...] | None = None  # a text row's request
    answer: str | None = None  # a text row's recorded answer, when the trace has it


@dataclass(slots=True)
class Skipped:
    """Rows left out on purpose (a log's failed requests), by reason, with the first of each."""

    reasons: dict[str, tuple[int, str]] = field(default_factory=dict)

    def add(self, reason: str, where: str) -> None:
        count, first = self.reasons.get(reason, (0, where))
        self.reasons[reason] = (count + 1, first)

    @property
    def total(self) -> int:
        return sum(count for count, _ in self.reasons.values())

    def describe(self) -> str:
        return "; ".join(f"{count} {reason} (first: {first})" for reason, (count, first) in self.reasons.items())


def _fail(where: str, field_name: str, problem: str) -> TraceError:
    return TraceError(f"{where}: {field_name}: {problem}")


def _number(data: dict[str, Any], key: str, where: str, *, optional: bool = False) -> float | None:
    value = data.get(key)
    if type(value) is int:  # the common case first: a million-row trace reads each row's numbers
        return float(value)
    if value is None:
        if optional:
            return None
        raise _fail(where, key, "missing")
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(str(value).strip())
        except ValueError:
            raise _fail(where, key, f"not a number: {value!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise _fail(where, key, f"not a finite number: {value!r}")
    return float(value)


def _length(data: dict[str, Any], key: str, where: str, *, least: int = 1) -> int:
    value = _number(data, key, where)
    assert value is not None
    if value != int(value):
        raise _fail(where, key, f"not a whole number of tokens: {value}")
    if value < least:
        raise _fail(where, key, f"{int(value)} tokens; it must be at least {least}")
    return int(value)


def _hash_ids(data: dict[str, Any], where: str) -> tuple[int, ...]:
    ids = data.get("hash_ids", [])
    if not isinstance(ids, list) or ids and {type(h) for h in ids} != {int}:
        raise _fail(where, "hash_ids", "must be a list of integers")
    return tuple(ids)


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
            raise _fail(where, key, f"not a timestamp (seconds or ISO 8601): {value!r}") from None
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    raise _fail(where, key, f"not a timestamp (seconds or ISO 8601): {value!r}")


def _jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with _open(path) as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise TraceError(f"{where}: not JSON: {exc}") from None
            if not isinstance(data, dict):
                raise TraceError(f"{where}: a trace line must be a JSON object")
            yield where, data


GZIP_MAGIC = b"\x1f\x8b"


def gzipped(path: Path) -> bool:
    """Whether the file is a gzip archive, by its first bytes (public traces are shipped as .jsonl.gz)."""
    try:
        with path.open("rb") as raw:
            return raw.read(2) == GZIP_MAGIC
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}") from None


class _TraceText:
    """A trace file's text, read from the file or from inside its gzip archive: what cannot be read as UTF-8 text
    (a truncated or corrupt archive, bytes that are not UTF-8) is a TraceError naming the file, wherever the
    reading meets it."""

    def __init__(self, path: Path) -> None:
        self._path = path
        try:
            self._file: Any = (gzip.open(path, "rt", encoding="utf-8", newline="") if gzipped(path)
                               else path.open(encoding="utf-8", newline=""))
        except OSError as exc:
            raise TraceError(f"cannot read trace {path}: {exc.strerror}") from None

    def _guarded(self, read: Any, *args: Any) -> Any:
        try:
            return read(*args)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise TraceError(f"{self._path}: a truncated or corrupt gzip archive ({exc})") from None
        except UnicodeDecodeError as exc:
            raise TraceError(f"{self._path}: not UTF-8 text (byte {exc.start} of a chunk: {exc.reason})") from None

    def read(self, size: int = -1) -> str:
        text: str = self._guarded(self._file.read, size)
        return text

    def __iter__(self) -> _TraceText:
        return self

    def __next__(self) -> str:
        line: str = self._guarded(self._file.__next__)
        return line

    def __enter__(self) -> _TraceText:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


def _open(path: Path) -> _TraceText:
    return _TraceText(path)


def _csv(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    with _open(path) as handle:
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
    for where, data in _jsonl(path):
        session = data.get("session_id")
        stamp, delay = _number(data, "timestamp", where, optional=True), _number(data, "delay", where, optional=True)
        if stamp is None and (session is None or delay is None):
            raise _fail(where, "timestamp", "missing (only a turn that continues a session may give a delay instead)")
        if delay is not None and delay < 0:
            raise _fail(where, "delay", f"negative: {delay}")
        yield TraceRow(where, None if stamp is None else stamp / 1000, _length(data, "input_length", where),
                       _length(data, "output_length", where), _hash_ids(data, where),
                       None if session is None else f"s{session}", (delay or 0.0) / 1000)


def _bailian(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """{chat_id, parent_chat_id (-1: a first turn), timestamp s, input_length, output_length, type, turn,
    hash_ids}: a turn's session is its first turn's chat id, which must come earlier in the file."""
    roots: dict[int, int] = {}
    for where, data in _jsonl(path):
        chat = _length(data, "chat_id", where, least=-(1 << 62))
        parent = _length(data, "parent_chat_id", where, least=-1)
        if parent == -1:
            root = chat
        elif parent in roots:
            root = roots[parent]
        else:
            raise _fail(where, "parent_chat_id", f"{parent} is not the chat_id of an earlier line")
        roots[chat] = root
        yield TraceRow(where, _number(data, "timestamp", where), _length(data, "input_length", where),
                       _length(data, "output_length", where), _hash_ids(data, where), f"c{root}")


def _azure(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """CSV TIMESTAMP, ContextTokens, GeneratedTokens: independent requests, no prefix information."""
    for where, row in _csv(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        if _length(row, "GeneratedTokens", where, least=0) == 0:
            skipped.add("requests that generated no token", where)
            continue
        yield TraceRow(where, _timestamp(row["TIMESTAMP"], where, "TIMESTAMP"), _length(row, "ContextTokens", where),
                       _length(row, "GeneratedTokens", where))


def _burstgpt(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """CSV Timestamp (s), Model, Request tokens, Response tokens, Total tokens, Log Type: a row with no response
    tokens is a request that failed in the log, left out."""
    for where, row in _csv(path, ("Timestamp", "Request tokens", "Response tokens")):
        if _length(row, "Response tokens", where, least=0) == 0 or _length(row, "Request tokens", where, least=0) == 0:
            skipped.add("failed requests (no request or response tokens)", where)
            continue
        yield TraceRow(where, _timestamp(row["Timestamp"], where, "Timestamp"), _length(row, "Request tokens", where),
                       _length(row, "Response tokens", where))


_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant",
          "model": "assistant", "assistant": "assistant", "system": "system"}


def _sharegpt(path: Path, skipped: Skipped) -> Iterator[TraceRow]:
    """[{id, conversations: [{from, value}]}]: one request per user turn answered in the file, its history the
    recorded turns before it. No timestamps: conversations start as the load allows."""
    try:
        with _open(path) as handle:
            items = json.load(handle)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(items, list):
        raise TraceError(f"{path}: a ShareGPT file is a JSON list of conversations")
    for number, item in enumerate(items, 1):
        where = f"{path}: conversation {number}"
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise _fail(where, "conversations", "missing or not a list")
        history: list[Message] = []
        session = f"g{number}"
        for t, turn in enumerate(turns, 1):
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise _fail(f"{where} turn {t}", "value", "missing or not text")
            role = _ROLES.get(str(turn.get("from", "")).lower())
            if role is None:
                raise _fail(f"{where} turn {t}", "from", f"unknown speaker {turn.get('from')!r}")
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
    for where, data in _jsonl(path):
        body = data.get("body", data.get("request", data))
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            raise _fail(where, "body.messages", "missing, empty or not a list")
        messages = body["messages"]
        if not all(isinstance(m, dict) and "role" in m for m in messages):
            raise _fail(where, "body.messages", "every message needs a role")
        response = data["response"] if isinstance(data.get("response"), dict) else {}
        usage = response["usage"] if isinstance(response.get("usage"), dict) else {}
        output = usage.get("completion_tokens") or body.get("max_completion_tokens") or body.get("max_tokens")
        if output is None:
            raise _fail(where, "response.usage.completion_tokens", "missing, and the body sets no max_tokens")
        output_length = _length({"output": output}, "output", where)
        stamp = data.get("timestamp", data.get("time", data.get("created")))
        digests = message_prefixes(messages)
        session = next((sessions[d] for d in reversed(digests[:-1]) if d in sessions), f"o{where}")
        sessions.setdefault(digests[-1], session)
        # The log's own prompt_tokens are another model's, maybe: a text row is counted in the target's tokens.
        yield TraceRow(where, None if stamp is None else _timestamp(stamp, where, "timestamp"), 0, output_length,
                       session=session, messages=tuple(messages))


READERS = {"mooncake": _mooncake, "bailian": _bailian, "azure": _azure, "burstgpt": _burstgpt,
           "sharegpt": _sharegpt, "openai-log": _openai_log}


def detect(path: Path) -> tuple[TraceFormat, str]:
    """The format of a trace file from its content, and why."""
    fmt, why = _detect(path)
    return fmt, f"{why}, gzip-compressed" if gzipped(path) else why


def _detect(path: Path) -> tuple[TraceFormat, str]:
    with _open(path) as handle:
        head = handle.read(65536)
    text = head.lstrip()
    if not text:
        raise TraceError(f"trace {path} is empty")
    first_line = text.splitlines()[0]
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
    if "input_length" in keys:
        return "mooncake", "JSON lines with input_length (Mooncake)"
    if keys & {"body", "request", "messages"}:
        return "openai-log", "JSON lines of OpenAI request bodies"
    raise TraceError(f"{path}:1: not a trace format loadrepro knows: JSON lines need input_length (mooncake), "
                     f"chat_id (bailian) or a request body with messages (openai-log); found {sorted(keys)[:8]}")


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
