"""One kind of row for every trace format (workload/trace_formats.py, workload/agent_traces.py), and the readers of
a trace's file and fields, whose errors name the file, the line (or row) and the field."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loadrepro.errors import TraceError

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of an agent trace's request's blocks that one message holds."""

    role: str  # system | user | assistant | tool
    blocks: int
    call: str | None = None  # an assistant's: the tool call it makes; a tool message's: the call it answers


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
    answer_s: float = 0.0  # how long its recorded answer took (WEKA's api_time; 0: not recorded)
    messages: tuple[Message, ...] | None = None  # a text row's request
    answer: str | None = None  # a text row's recorded answer, when the trace has it
    # Agent traces (workload/agent_traces.py):
    layout: tuple[Segment, ...] | None = None  # its messages as runs of its blocks (None: one message of them all)
    joins: tuple[str, ...] = ()  # the sessions (subagents) that must have ended before it is sent
    tree: str | None = None  # the session of the agent whose tree its session is in (None: its own root)
    stop: str = ""  # why its recorded answer stopped: "tool_use" makes a tool result of the next input
    spawned_by: tuple[str, int] | None = None  # a subagent's first: started once that session's turn answered
    # dag_jsonl: the messages this turn adds after the engine's answer to the turn before (None: sent as planned); a
    # fork's first turn goes on from its parent's history and answer; what the turn adds to the body (tools, extra)
    tail: tuple[Message, ...] | None = None
    forked: bool = False
    extra: dict[str, Any] | None = None


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


def fail(where: str, field_name: str, problem: str) -> TraceError:
    return TraceError(f"{where}: {field_name}: {problem}")


def number(data: dict[str, Any], key: str, where: str, *, optional: bool = False) -> float | None:
    value = data.get(key)
    if type(value) is int:  # the common case first: a million-row trace reads each row's numbers
        return float(value)
    if value is None:
        if optional:
            return None
        raise fail(where, key, "missing")
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(str(value).strip())
        except ValueError:
            raise fail(where, key, f"not a number: {value!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise fail(where, key, f"not a finite number: {value!r}")
    return float(value)


def length(data: dict[str, Any], key: str, where: str, *, least: int = 1) -> int:
    value = number(data, key, where)
    assert value is not None
    if value != int(value):
        raise fail(where, key, f"not a whole number of tokens: {value}")
    if value < least:
        raise fail(where, key, f"{int(value)} tokens; it must be at least {least}")
    return int(value)


def read_hash_ids(data: dict[str, Any], where: str) -> tuple[int, ...]:
    ids = data.get("hash_ids", [])
    if not isinstance(ids, list) or ids and {type(h) for h in ids} != {int}:
        raise fail(where, "hash_ids", "must be a list of integers")
    return tuple(ids)


def jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with open_trace(path) as lines:
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


def open_trace(path: Path) -> _TraceText:
    return _TraceText(path)
