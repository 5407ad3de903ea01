"""What the simulated engine's scheduler takes and says: a request and its state, a refusal at submission, a
finished request, the scripted failure, one step's output and the scheduler's figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from loadrepro.sim.replies import Choice


class State(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"


@dataclass(slots=True, eq=False)
class SimRequest:
    id: int
    tokens: list[str]
    hashes: list[bytes]
    max_tokens: int
    output_len: int
    state: State = State.WAITING
    blocks: list[int] = field(default_factory=list)
    draft: list[int] = field(default_factory=list)
    target: int = 0  # context tokens to hold once this admission's prefill is done
    computed: int = 0
    generated: int = 0
    registered: int = 0  # prompt blocks already findable in the prefix cache
    cached_tokens: int = -1  # prompt tokens served from the prefix cache at first admission
    preempted: bool = False
    tag: tuple[str, int] | None = None  # the conversation tag in its prompt, and where
    fingerprint: bytes = b""  # of the context it computes from (sim/replies.py), set at admission
    context_tag: str | None = None  # the tag that context holds
    previous: str = ""  # the last token it generated

    @property
    def prompt_len(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True, slots=True)
class Rejection:
    """A request refused at submission; `status` and `message` go to the client as they are."""

    status: int
    message: str
    code: str = "context_length_exceeded"


@dataclass(frozen=True, slots=True)
class Finished:
    request_id: int
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class ScriptedDeath:
    """The scripted engine failure: the message the engine would log and return from then on."""

    message: str
    request_id: int
    pending: int  # requests in the engine when it died


@dataclass(slots=True)
class StepOutput:
    tokens: list[tuple[int, Choice]] = field(default_factory=list)  # (request id, its token) for each this step
    finished: list[Finished] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    death: ScriptedDeath | None = None


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    running: int
    waiting: int
    preemptions: int
    prefix_queries: int  # prompt tokens looked up in the prefix cache
    prefix_hits: int  # of which found
    rejected: int
    primary_total: int
    primary_used: int
    primary_cached_free: int
    draft_total: int
    draft_used: int
    dead: bool
