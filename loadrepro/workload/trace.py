"""Mooncake-format trace replay: each hash id is a fixed block of text, timestamps are the arrival schedule.

A trace line is `{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}`. Block
`h` is the same text wherever it appears and costs exactly `trace_block_tokens` target tokens (with the newline
that joins it to the next), so requests whose hash ids start alike share a byte-identical prefix of exactly
(common blocks x block tokens). A request shorter than its blocks cuts its last block short.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadrepro.errors import ProfileError
from loadrepro.profile import WorkloadSpec
from loadrepro.workload.apis import chat_form
from loadrepro.workload.assemble import Assembler
from loadrepro.workload.corpus import FAKER_VERSION
from loadrepro.workload.model import Conversation, PlannedRequest, Workload

_BLOCK, _TAIL = 4, 5  # SeedSequence streams, apart from those of conversations


@dataclass(frozen=True, slots=True)
class TraceRow:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _row(data: object, where: str) -> TraceRow:
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: a trace line must be a JSON object")
    try:
        row = TraceRow(float(data["timestamp"]), int(data["input_length"]), int(data["output_length"]),
                       tuple(int(h) for h in data.get("hash_ids", [])))
    except KeyError as exc:
        raise ProfileError(f"{where}: missing {exc.args[0]!r}") from exc
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{where}: {exc}") from exc
    if row.input_length < 1 or row.output_length < 1:
        raise ProfileError(f"{where}: input_length and output_length must be positive")
    return row


def read_trace(path: str | Path) -> list[TraceRow]:
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ProfileError(f"cannot read trace {path}: {exc.strerror}") from exc
    rows = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(_row(json.loads(line), f"{path}:{number}"))
            except json.JSONDecodeError as exc:
                raise ProfileError(f"{path}:{number}: not JSON: {exc.msg}") from exc
    if not rows:
        raise ProfileError(f"trace {path} has no requests")
    return rows


class _Blocks:
    """Block texts by hash id, built once each."""

    def __init__(self, assembler: Assembler, seed: int, block_tokens: int) -> None:
        self._assembler, self._seed, self.tokens = assembler, seed, block_tokens
        self._made: dict[int, tuple[str, np.ndarray, np.ndarray, float]] = {}
        self._full: dict[int, str] = {}

    def _records(self, hash_id: int) -> tuple[str, np.ndarray, np.ndarray, float]:
        if hash_id not in self._made:
            c = self._assembler.calibration
            lead = f"[block {hash_id}]"
            lead_cost = c.estimate(lead) + c.join_tokens
            budget = self.tokens - c.join_tokens - lead_cost
            rng = np.random.default_rng([self._seed, _BLOCK, hash_id])
            self._made[hash_id] = (lead, *self._assembler.records(rng, budget), lead_cost)
        return self._made[hash_id]

    def text(self, hash_id: int, tokens: float) -> str:
        """Block `hash_id` cut to `tokens` (the whole block when `tokens` is the block size less its join)."""
        lead, indices, cumulative, lead_cost = self._records(hash_id)
        budget = tokens - lead_cost
        keep = int(np.searchsorted(cumulative, budget, side="right"))
        spent = float(cumulative[keep - 1]) if keep else 0.0
        return self._assembler.join(lead, indices[:keep], spent, budget)

    def full(self, hash_id: int) -> str:
        if hash_id not in self._full:
            self._full[hash_id] = self.text(hash_id, self.tokens - self._assembler.calibration.join_tokens)
        return self._full[hash_id]


def _shared_blocks(rows: list[TraceRow]) -> list[int]:
    """For each row, how many of its leading hash ids an earlier row also started with."""
    seen: set[tuple[int, ...]] = set()
    shared = []
    for row in rows:
        k = 0
        while k < len(row.hash_ids) and row.hash_ids[:k + 1] in seen:
            k += 1
        shared.append(k)
        seen.update(row.hash_ids[:i] for i in range(1, len(row.hash_ids) + 1))
    return shared


def build_trace(rows: list[TraceRow], spec: WorkloadSpec, api: str, assembler: Assembler) -> Workload:
    c = assembler.calibration
    block = spec.trace_block_tokens
    blocks = _Blocks(assembler, spec.seed, block)
    start = min(r.timestamp_ms for r in rows)
    overhead = c.chat_base - c.chat_per_message if chat_form(api) else c.text_base
    conversations = []
    for j, (row, shared) in enumerate(zip(rows, _shared_blocks(rows))):
        whole = min(len(row.hash_ids), row.input_length // block)
        parts = [blocks.full(h) for h in row.hash_ids[:whole]]
        rest = row.input_length - whole * block
        if rest > 0 and whole < len(row.hash_ids):
            parts.append(blocks.text(row.hash_ids[whole], rest))
        elif rest > 0:  # the trace's hash ids cover less than input_length: this request's own records
            parts.append(assembler.text(np.random.default_rng([spec.seed, _TAIL, j]), rest))
        text = "\n".join(parts)
        body: dict[str, object] = ({"messages": [{"role": "user", "content": text}]} if chat_form(api)
                                   else {"prompt": text})
        body |= {"max_tokens": row.output_length, "ignore_eos": spec.ignore_eos, "stream": True,
                 "stream_options": {"include_usage": True}}
        if chat_form(api):
            body["max_completion_tokens"] = row.output_length
        expected = row.input_length + overhead
        planned = PlannedRequest(j, 1, body, row.output_length, int(round(expected)),
                                 min(shared * block, row.input_length), (row.timestamp_ms - start) / 1000)
        conversations.append(Conversation(j, None, (planned,)))
    return Workload("trace", api, spec.seed, FAKER_VERSION, c.source, tuple(conversations))

