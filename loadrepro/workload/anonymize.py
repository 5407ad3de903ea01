"""`trace anonymize`: a text trace (openai-log, sharegpt) in, a Mooncake-format trace out that keeps what a bug
report needs (lengths, sessions, timestamps, which token blocks are shared) and nothing of the text. An agent's log
(requests carrying tool calls and tool results) comes out as a WEKA agent trace instead, a session a trace, its tool
round trips kept: a request whose input is a tool result says so, and the request before it stopped for the tool.

Each prompt is tokenized as the target sees it (chat template applied) and cut into blocks of `block_tokens`
tokens. A block's id is a keyed hash of the block's tokens chained with the id of the block before it (as a
prefix cache keys its blocks), so equal prefixes get equal ids; the key is drawn at random for each call and
never written, and the hashes are then numbered in order of first appearance. The output holds no text, no token
id and no hash of one: nothing about the words can be recovered from it, or by hashing guesses of them.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson

from loadrepro.errors import TraceError, UsageError
from loadrepro.workload.trace_formats import TEXT_FORMATS, read_rows
from loadrepro.workload.trace_rows import Skipped

Messages = list[dict[str, Any]]


class ChatTokenizer(Protocol):
    source: str

    async def chat_ids(self, messages: Messages) -> list[int]: ...

    async def count_text(self, text: str) -> int: ...


Output = Literal["auto", "mooncake", "weka"]  # auto: weka when the log holds tool calls, else mooncake


@dataclass(frozen=True, slots=True)
class Anonymized:
    output: Path
    trace_format: str
    requests: int
    sessions: int
    blocks: int  # distinct block ids written
    block_tokens: int
    tokenizer: str
    skipped: Skipped
    written_format: str = "mooncake"  # or weka: an agent's log, its tool round trips kept


class _Keyed:
    """Block ids: a keyed, chained hash of each block's tokens, numbered in order of first appearance."""

    def __init__(self, block_tokens: int) -> None:
        self._key = os.urandom(32)  # never written: without it no id can be tied to any text
        self._ids: dict[bytes, int] = {}
        self.block_tokens = block_tokens

    def __len__(self) -> int:
        return len(self._ids)

    def hash_ids(self, tokens: list[int]) -> list[int]:
        out, previous = [], b""
        for start in range(0, len(tokens), self.block_tokens):
            block = tokens[start:start + self.block_tokens]
            data = previous + b"".join(t.to_bytes(4, "little", signed=False) for t in block)
            previous = hashlib.blake2b(data, key=self._key, digest_size=16).digest()
            out.append(self._ids.setdefault(previous, len(self._ids)))
        return out


def _tool_turns(messages: Messages) -> bool:
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


class _Weka:
    """Each session as a WEKA agent trace: its requests held (numbers only) until the log ends."""

    def __init__(self, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self.traces: dict[int, dict[str, Any]] = {}

    def add(self, session: int, stamp: float, ids: list[int], hash_ids: list[int], output_length: int,
            messages: Messages, system_tokens: int) -> None:
        trace = self.traces.setdefault(session, {
            "id": f"session-{session}", "block_size": self.block_tokens, "hash_id_scope": "global",
            "tool_tokens": 0, "system_tokens": system_tokens, "requests": []})
        requests = trace["requests"]
        tool = bool(messages) and messages[-1].get("role") == "tool"
        if tool and requests:
            requests[-1]["stop"] = "tool_use"  # its answer called the tool whose result this is
        whole = hash_ids[:len(ids) // self.block_tokens]  # a WEKA trace's ids are of whole blocks only
        requests.append({"t": round(stamp, 3), "type": "n", "in": len(ids), "out": output_length, "hash_ids": whole,
                         "input_types": ["tool_result" if tool else "text"], "stop": "end_turn"})

    def lines(self) -> list[bytes]:
        return [orjson.dumps(t) + b"\n" for t in self.traces.values()]


async def anonymize(path: Path, output: Path, trace_format: str, tokenizer: ChatTokenizer, block_tokens: int,
                    progress: Callable[[int], None] | None = None, to: Output = "auto") -> Anonymized:
    """Write the Mooncake-format (or WEKA) trace of a text trace; the output appears whole or not at all."""
    chosen, rows = read_rows(path, trace_format, skipped := Skipped())
    if chosen not in TEXT_FORMATS or chosen == "dag":
        raise UsageError(f"trace anonymize reads text traces (openai-log, sharegpt); {path} is {chosen}, which "
                         "it does not read")
    if to == "auto":  # a first pass over the messages alone: does any request carry a tool turn
        to = "weka" if any(_tool_turns(list(r.messages or ())) for r in read_rows(path, chosen)[1]) else "mooncake"
    weka = _Weka(block_tokens) if to == "weka" else None
    keyed, sessions = _Keyed(block_tokens), dict[str | None, int]()
    first: float | None = None
    count = 0
    output.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out:
            for row in rows:
                assert row.messages is not None
                ids = await tokenizer.chat_ids([dict(m) for m in row.messages])
                if row.timestamp_s is not None and first is None:
                    first = row.timestamp_s
                stamp = 0.0 if row.timestamp_s is None or first is None else row.timestamp_s - first
                session = sessions.setdefault(row.session, len(sessions))
                output_length = row.output_length or max(1, await tokenizer.count_text(row.answer or ""))
                if weka is not None:
                    system = [m for m in row.messages[:1] if m.get("role") == "system"]
                    weka.add(session, stamp, ids, keyed.hash_ids(ids), output_length, list(row.messages),
                             await tokenizer.count_text(str(system[0].get("content") or "")) if system else 0)
                else:
                    line = {"timestamp": round(stamp * 1000, 3), "session_id": session, "input_length": len(ids),
                            "output_length": output_length, "hash_ids": keyed.hash_ids(ids)}
                    out.write(orjson.dumps(line) + b"\n")
                count += 1
                if progress is not None and count % 1000 == 0:
                    progress(count)
        if not count:
            raise TraceError(f"trace {path} has no requests")
        if weka is not None:
            with open(partial, "ab") as out:
                out.writelines(weka.lines())
        os.replace(partial, output)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return Anonymized(output, chosen, count, len(sessions), len(keyed), block_tokens, tokenizer.source, skipped,
                      to)
