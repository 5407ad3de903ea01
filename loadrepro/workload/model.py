"""A Workload is plain data: conversations of turns, each a request body with its expected lengths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    conversation: int
    turn: int  # 1-based; turn 1 warms the conversation's prefix
    body: dict[str, Any]  # `messages` (chat) or `prompt` (completions); the client adds model and stream fields
    max_tokens: int
    expected_prompt_tokens: int
    shared_prefix_tokens: int  # of those, expected to be found in the prefix cache
    arrival_s: float | None = None  # trace replay: offset from the start; None: sent when its turn comes
    delay_s: float = 0.0  # trace replay: think time after the turn before it answered
    # trace_history = "live": the messages that follow the turn before's answer; the request sent is that turn's
    # messages, the engine's own answer to it, then these (None: this body as it is)
    live_tail: tuple[dict[str, Any], ...] | None = None


@dataclass(frozen=True, slots=True)
class Conversation:
    index: int
    group: int | None
    turns: tuple[PlannedRequest, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    kind: str  # conversations | trace
    api: str  # chat | completions
    seed: int
    faker_version: str
    calibration_source: str
    conversations: tuple[Conversation, ...]
    origin: str = ""  # where its requests came from, in a sentence (a trace: its file, format and window)

    @property
    def requests(self) -> list[PlannedRequest]:
        return [turn for conversation in self.conversations for turn in conversation.turns]
