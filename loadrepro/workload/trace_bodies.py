"""Request bodies of a trace's rows (workload/trace.py), made when they are sent: a token-count row's blocks of
text (each hash id one fixed text), an agent trace's blocks in the messages its layout says, a text row's own
messages. Pure, so a body made twice (by a worker, for the exported workload, for a live history) is the same bytes,
and picklable for workers and Ray actors."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadrepro.config.workload_spec import WorkloadSpec
from loadrepro.sim.tokenizer import message_text
from loadrepro.workload.assemble import Assembler
from loadrepro.workload.generation import generation
from loadrepro.workload.tokens import Calibration, block_lead
from loadrepro.workload.trace_rows import Segment, TraceRow

_BLOCK, _TAIL = 4, 5  # SeedSequence streams, apart from those of conversations
TOOL_NAME = "recorded_tool"  # the function an agent trace's recorded tool calls name (the trace does not say)


_CACHED_BLOCKS = 4096  # block texts kept (a 512-token block is about 2 KB): a trace's hot prefixes, not all of it


class _Blocks:
    """Block texts by hash id, the most recently used kept. Pickled without them (workers make their own)."""

    def __init__(self, assembler: Assembler, seed: int, block_tokens: int) -> None:
        self._assembler, self._seed, self.tokens = assembler, seed, block_tokens
        self._caches()

    def _caches(self) -> None:
        self.full = functools.lru_cache(_CACHED_BLOCKS)(self._full)

    def __getstate__(self) -> tuple[Assembler, int, int]:
        return self._assembler, self._seed, self.tokens

    def __setstate__(self, state: tuple[Assembler, int, int]) -> None:
        self._assembler, self._seed, self.tokens = state
        self._caches()

    def _rng(self, stream: int, key: int) -> np.random.Generator:
        """What a block's (or a request's own tail's) text is drawn with: the seed's, the same for the same key."""
        return np.random.default_rng([self._seed, stream, key])

    def text(self, hash_id: int, tokens: float) -> str:
        """Block `hash_id` cut to `tokens` (the whole block when `tokens` is the block size less its join): its lead,
        then text of the record pool drawn from the seed and the id, so the same id is the same bytes everywhere."""
        c = self._assembler.calibration
        lead_cost = c.lead_tokens + c.join_tokens
        if tokens < lead_cost + c.filler_tokens:
            # Too short for the block's lead (small blocks, Bailian's 16 tokens in a tokenizer that splits digits):
            # words drawn for the id alone, so the length is right and the block still its own.
            return self.tail(_BLOCK, hash_id, tokens + c.join_tokens)
        return self._assembler.window(block_lead(hash_id), self._rng(_BLOCK, hash_id), tokens - lead_cost)

    def tail(self, stream: int, key: int, tokens: float) -> str:
        """Text of the record pool with no lead, drawn from the seed, `stream` and `key`: `tokens` with the newline
        that joins it to the text before it."""
        return self._assembler.window("", self._rng(stream, key), tokens)

    def _full(self, hash_id: int) -> str:
        return self.text(hash_id, self.tokens - self._assembler.calibration.join_tokens)


def messages_tokens(c: Calibration, messages: tuple[dict[str, Any], ...], chat: bool) -> float:
    """The estimated prompt tokens of these messages, template included."""
    body = sum(c.estimate(message_text(m.get("content"))) for m in messages)
    if chat:
        return c.chat_base + (len(messages) - 2) * c.chat_per_message + body
    return c.text_base + c.estimate(prompt_text(messages))


def prompt_text(messages: tuple[dict[str, Any], ...]) -> str:
    """Messages as one completions prompt."""
    return "".join(f"### {m.get('role', 'user').title()}\n{message_text(m.get('content'))}\n\n" for m in messages) + \
        "### Assistant\n"


def agent_message(segment: Segment, text: str, tools: str) -> dict[str, Any]:
    """One message of an agent's request: with `tools` = "tool", an assistant's tool call and the tool message that
    answers it as OpenAI shapes them; with "user", plain assistant and user text."""
    if tools != "tool" or segment.call is None:
        return {"role": "user" if segment.role == "tool" else segment.role, "content": text}
    if segment.role == "tool":
        return {"role": "tool", "tool_call_id": segment.call, "content": text}
    call = {"id": segment.call, "type": "function", "function": {"name": TOOL_NAME, "arguments": "{}"}}
    return {"role": "assistant", "content": text, "tool_calls": [call]}


class Bodies:
    """Request bodies of a trace's rows, made when they are sent: pure, so a body made twice (by a worker, for the
    exported workload, for a live history) is the same bytes, and picklable for workers and Ray actors."""

    def __init__(self, block_tokens: int, spec: WorkloadSpec, chat: bool, assembler: Assembler) -> None:
        """`block_tokens`: the trace's tokens per hash id (0: it has none)."""
        self.chat, self.seed, self.spec, self.block = chat, spec.seed, spec, block_tokens
        self.assembler = assembler
        self.blocks = _Blocks(assembler, spec.seed, block_tokens or 1)

    def make(self, j: int, row: TraceRow, max_tokens: int) -> dict[str, Any]:
        if row.messages is not None:
            body = self._messages(row)
        elif row.layout is not None:
            body = self._agent(j, row)
        else:
            body = self._tokens(j, row)
        return body | generation(self.spec, max_tokens, self.chat, (j,)) | (row.extra or {})

    def _agent(self, j: int, row: TraceRow) -> dict[str, Any]:
        """An agent trace's request: its blocks in the messages its layout says, the tokens its hash ids do not
        cover (less than a block) at the end of the last."""
        assert row.layout is not None
        messages, k, last = [], 0, len(row.layout) - 1
        rest = row.input_length - len(row.hash_ids) * self.block
        for i, segment in enumerate(row.layout):
            parts = [self.blocks.full(h) for h in row.hash_ids[k:k + segment.blocks]]
            k += segment.blocks
            if i == last and rest > 0:
                parts.append(self.blocks.tail(_TAIL, j, rest))
            messages.append(agent_message(segment, "\n".join(parts), self.spec.trace_tool_messages))
        return {"messages": messages} if self.chat else {"prompt": prompt_text(tuple(messages))}

    def _tokens(self, j: int, row: TraceRow) -> dict[str, Any]:
        block = self.block
        whole = min(len(row.hash_ids), row.input_length // block) if block else 0
        parts = [self.blocks.full(h) for h in row.hash_ids[:whole]]
        rest = row.input_length - whole * block
        if rest > 0 and whole < len(row.hash_ids):
            parts.append(self.blocks.text(row.hash_ids[whole], rest))
        elif rest > 0:  # the trace's hash ids cover less than input_length: this request's own records
            parts.append(self.blocks.tail(_TAIL, j, rest))
        text = "\n".join(parts)
        return {"messages": [{"role": "user", "content": text}]} if self.chat else {"prompt": text}

    def _messages(self, row: TraceRow) -> dict[str, Any]:
        assert row.messages is not None
        return {"messages": [dict(m) for m in row.messages]} if self.chat else {"prompt": prompt_text(row.messages)}


@dataclass(frozen=True, slots=True)
class TraceBody:
    """Row j's body, to be made (a third of the memory of a partial of a bound method: a million rows hold one)."""

    bodies: Bodies
    j: int
    row: TraceRow
    max_tokens: int

    def __call__(self) -> dict[str, Any]:
        return self.bodies.make(self.j, self.row, self.max_tokens)
