"""Prefix-shared multi-turn conversations, built from the record pool to token targets. Pure.

Conversation i: a system prompt shared by all, then a user message holding (its group's shared document, when
`groups` > 0, and) its own document of records, sized so the whole turn-1 prompt is `prefix_tokens` long in
the target's tokens, template included. Turn 1 warms that prefix. Each later turn resends the full history plus
a fixed synthetic assistant reply for the previous turn and a new tool result of `turn_tokens`, so every turn's
prompt starts with the previous one byte for byte, whatever the engine answered.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadrepro.config.workload_spec import WorkloadSpec
from loadrepro.errors import ProfileError
from loadrepro.workload.apis import chat_form
from loadrepro.workload.assemble import Assembler
from loadrepro.workload.corpus import FAKER_VERSION
from loadrepro.workload.generation import generation, streams
from loadrepro.workload.lengths import prefix_lengths
from loadrepro.workload.model import Conversation, PlannedRequest, Workload
from loadrepro.workload.tokens import Calibration

SYSTEM_PROMPT = ("You are an operations analyst for an online retailer. You read customer records, orders, "
                 "support tickets, service logs and tool results, keep all of them in mind, and answer precisely, "
                 "citing record ids.")
QUESTION = "Review every record above. Questions about them follow in this conversation."
_MIN_OWN_TOKENS = 32
# Streams for numpy's SeedSequence: (seed, stream, index) keeps each piece independent of the others' sizes.
_LENGTHS, _GROUP, _CONVERSATION = 1, 2, 3


MARKER = re.compile(r"\bLR[A-Z2-7]{8}\b")  # a conversation's tag: found in another's answer, it is cross-talk


def marker(seed: int, conversation: int) -> str:
    """The tag only this conversation's prompt carries (in its case file's first line)."""
    digest = hashlib.blake2b(f"{seed}:{conversation}".encode(), digest_size=5).digest()
    return "LR" + base64.b32encode(digest).decode()


def _reply(conversation: int, turn: int) -> str:
    return (f"Noted for case {conversation}, step {turn}: I have checked the records so far and will continue "
            "with the next result.")


@dataclass(frozen=True, slots=True)
class _Framing:
    """How one API wraps the conversation, and what that costs in tokens."""

    chat: bool
    base: float  # around system + first user message
    per_turn: float  # around each later reply + user message

    def first(self, user: str) -> dict[str, Any]:
        if self.chat:
            return {"messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]}
        return {"prompt": f"### System\n{SYSTEM_PROMPT}\n\n### User\n{user}\n\n### Assistant\n"}

    def extend(self, body: dict[str, Any], reply: str, user: str) -> dict[str, Any]:
        if self.chat:
            return {"messages": body["messages"] + [{"role": "assistant", "content": reply},
                                                    {"role": "user", "content": user}]}
        return {"prompt": f"{body['prompt']}{reply}\n\n### User\n{user}\n\n### Assistant\n"}


def _framing(api: str, c: Calibration) -> _Framing:
    if chat_form(api):
        return _Framing(True, c.chat_base, 2 * c.chat_per_message)
    return _Framing(False, c.text_base + c.estimate("### System\n\n\n### User\n\n\n### Assistant\n"),
                    c.estimate("\n\n### User\n\n\n### Assistant\n"))


def _whole(tokens: float) -> int:
    """Planned tokens as a request carries them."""
    return int(round(tokens))


def _request(conversation: int, turn: int, body: dict[str, Any], spec: WorkloadSpec, chat: bool,
             expected: float, shared: float) -> PlannedRequest:
    # Turn 1 warms the prefix for the turns after it; a single-turn conversation is all follow-up.
    max_tokens = spec.warm_max_tokens if turn == 1 and spec.turns > 1 else spec.max_tokens
    stream = streams(spec.stream, spec.seed, (conversation, turn))
    body = {**body, **generation(spec, max_tokens, chat, (conversation, turn))}
    return PlannedRequest(conversation, turn, body, max_tokens, _whole(expected), _whole(shared),
                          stream=stream)


@dataclass(frozen=True, slots=True)
class _Sizes:
    """One conversation's planned token counts: what its texts are assembled to."""

    index: int
    group: int | None
    own: float  # its own document's tokens
    expected: tuple[float, ...]  # each turn's prompt
    shared: tuple[float, ...]  # of each turn's prompt, what an earlier request holds

    @property
    def planned(self) -> tuple[int, ...]:
        """Each turn's prompt tokens as its request is planned at (PlannedRequest.expected_prompt_tokens)."""
        return tuple(_whole(e) for e in self.expected)


def _sizes(spec: WorkloadSpec, api: str, calibration: Calibration,
           corrections: dict[int, float] | None = None, only: set[int] | None = None) -> list[_Sizes]:
    c = calibration
    framing = _framing(api, c)
    lengths = prefix_lengths(spec.conversations, spec.prefix_tokens, spec.prefix_tokens_p95,
                             np.random.default_rng([spec.seed, _LENGTHS]))
    system = framing.base + c.estimate(SYSTEM_PROMPT)
    fixed = system + c.estimate(QUESTION) + c.join_tokens
    head_tokens = _group_tokens(spec) + c.join_tokens if spec.groups else 0.0
    sizes = []
    for i, prefix in enumerate(lengths.tolist()):
        if only is not None and i not in only:
            continue
        group = i % spec.groups if spec.groups else None
        if spec.prefix_tokens_p95:  # a drawn length below what a prompt needs is the tail of the draw: lift it
            prefix = max(prefix, int(fixed + head_tokens + _MIN_OWN_TOKENS + 1))
        own = prefix - fixed - head_tokens
        if own < _MIN_OWN_TOKENS:
            raise ProfileError(f"workload.prefix_tokens: conversation {i} wants {prefix} tokens, which leaves "
                               f"{own:.0f} "
                               f"for its own records after the system prompt, group prefix and template "
                               f"(at least {_MIN_OWN_TOKENS} needed)")
        # The target counted it longer than planned: its records shortened, down to the least a prompt holds (the
        # profile asked for nothing wrong; the prompt then runs a little long, which the run's length check says).
        own = max(own + (corrections or {}).get(i, 0.0), _MIN_OWN_TOKENS)
        expected = [float(prefix)]
        # What an earlier request holds of turn 1: the system prompt (every conversation's, from the second on),
        # then its group's document (from the group's second conversation on).
        earlier_in_group = group is not None and i >= spec.groups
        shared = [(system + (head_tokens if earlier_in_group else 0.0)) if i else 0.0]
        for turn in range(2, spec.turns + 1):
            shared.append(expected[-1])
            expected.append(expected[-1] + framing.per_turn + c.estimate(_reply(i, turn - 1)) + spec.turn_tokens)
        sizes.append(_Sizes(i, group, own, tuple(expected), tuple(shared)))
    return sizes


def _group_tokens(spec: WorkloadSpec) -> int:
    return (spec.group_prefix_tokens or spec.prefix_tokens // 2) if spec.groups else 0


def planned_prompt_tokens(spec: WorkloadSpec, api: str, calibration: Calibration) -> int:
    """The prompt tokens the workload's requests are planned at, in all (as build_conversations plans them), without
    assembling a text."""
    return sum(sum(size.planned) for size in _sizes(spec, api, calibration))


def sampled_conversations(spec: WorkloadSpec, api: str, calibration: Calibration) -> set[int]:
    """The conversations holding the workload's first request, its last and its longest prompt (the first of the
    longest), found without assembling a text: what a check of the plan counts on the target."""
    sizes = _sizes(spec, api, calibration)
    longest = max(range(len(sizes)), key=lambda i: max(sizes[i].planned))
    return {0, len(sizes) - 1, longest}


def build_conversations(spec: WorkloadSpec, api: str, assembler: Assembler,
                        corrections: dict[int, float] | None = None, only: set[int] | None = None) -> Workload:
    """`corrections` adds tokens to a conversation's own document: what the target counted short of the plan.
    `only`: those conversations alone (each is drawn from its own streams, so it comes out as in the whole)."""
    c = assembler.calibration
    framing = _framing(api, c)
    groups = [assembler.text(np.random.default_rng([spec.seed, _GROUP, g]), _group_tokens(spec),
                             lead=f"Shared reference {g} for every case in this group:") for g in range(spec.groups)]
    conversations = []
    for size in _sizes(spec, api, c, corrections, only):
        i = size.index
        head = groups[size.group] + "\n" if size.group is not None else ""
        rng = np.random.default_rng([spec.seed, _CONVERSATION, i])
        document = assembler.text(rng, size.own, lead=f"Case file {spec.seed}-{i} (tag {marker(spec.seed, i)}): the "
                                  "records under review.")
        body = framing.first(f"{head}{document}\n{QUESTION}")
        turns = [_request(i, 1, body, spec, framing.chat, size.expected[0], size.shared[0])]
        for turn in range(2, spec.turns + 1):
            result = assembler.text(rng, spec.turn_tokens, lead=f"Tool result for step {turn}:")
            body = framing.extend(body, _reply(i, turn - 1), result)
            turns.append(_request(i, turn, body, spec, framing.chat, size.expected[turn - 1],
                                  size.shared[turn - 1]))
        conversations.append(Conversation(i, size.group, tuple(turns)))
    return Workload("conversations", api, spec.seed, FAKER_VERSION, c.source, tuple(conversations))
