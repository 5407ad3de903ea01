"""A Workload is plain data: conversations of turns, each a request body with its expected lengths."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

Body = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Deferred:
    """A request body made when it is needed (a trace's: a million-row trace does not hold a million prompts),
    then passed through `steps` in order. `make` and the steps are pure and picklable (workers and Ray actors
    receive them), so a body made twice is the same bytes."""

    make: Callable[[], Body]
    steps: tuple[Callable[[Body], Body], ...] = ()

    def __call__(self) -> Body:
        body = self.make()
        for step in self.steps:
            body = step(body)
        return body


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    conversation: int
    turn: int  # 1-based; turn 1 warms the conversation's prefix
    # `messages` (chat) or `prompt` (completions); the client adds model and stream fields. Read it with payload().
    body: Body | Deferred
    max_tokens: int
    expected_prompt_tokens: int
    shared_prefix_tokens: int  # of those, expected to be found in the prefix cache
    arrival_s: float | None = None  # trace replay: offset from the start; None: sent when its turn comes
    delay_s: float = 0.0  # trace replay: think time after the turn before it answered
    # trace_history = "live": the messages that follow the turn before's answer; the request sent is that turn's
    # messages, the engine's own answer to it, then these (None: this body as it is)
    live_tail: tuple[dict[str, Any], ...] | None = None
    stream: bool = True  # its body asks for a stream; False: the whole answer at once ([workload] stream)
    joins: tuple[int, ...] = ()  # agent traces: the conversations (subagents) that must have ended before it is sent
    # agent traces: of shared_prefix_tokens, those its own tree (an agent and its subagents) sent before; the rest
    # only other trees had (None: not counted, a workload of no trees)
    own_prefix_tokens: int | None = None
    headers: tuple[tuple[str, str], ...] = ()  # sent with it besides the body's ([workload] session_header)

    def payload(self) -> Body:
        """The request body (a deferred one made now: keep it no longer than the request)."""
        return self.body() if isinstance(self.body, Deferred) else self.body

    def then(self, step: Callable[[Body], Body]) -> PlannedRequest:
        """The request with its body passed through `step` (when it is made, for a deferred one)."""
        body = Deferred(self.body.make, (*self.body.steps, step)) if isinstance(self.body, Deferred) else \
            step(self.body)
        return replace(self, body=body)


@dataclass(frozen=True, slots=True)
class Conversation:
    index: int
    group: int | None
    turns: tuple[PlannedRequest, ...]
    tree: int | None = None  # agent traces: the conversation of the agent whose subagent this is (None: a root)
    # agent sessions: the conversation and turn after whose answer it starts (None: it starts when its time comes)
    spawned_by: tuple[int, int] | None = None
    forked: bool = False  # dag_jsonl: it goes on from that turn's history and the engine's answer to it

    @property
    def root(self) -> int:
        """The conversation its tree is named by: a tree is sent from one worker (its joins wait on each other)."""
        return self.index if self.tree is None else self.tree


@dataclass(frozen=True, slots=True)
class Workload:
    kind: str  # conversations | trace
    api: str  # chat | completions
    seed: int
    faker_version: str
    calibration_source: str
    conversations: tuple[Conversation, ...]
    origin: str = ""  # where its requests came from, in a sentence (a trace: its file, format and window)
    # trajectory_start: requests sent before the load and not judged, each turn 0 of the conversation it warms
    warmups: tuple[PlannedRequest, ...] = ()

    @property
    def requests(self) -> list[PlannedRequest]:
        return [turn for conversation in self.conversations for turn in conversation.turns]
