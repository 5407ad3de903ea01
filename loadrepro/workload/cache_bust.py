"""[workload] cache_bust = "tree": a marker unique to the run and the tree (`[rid:<12 hex>]` and a blank line, as
AIPerf's) starts the first message of every request of a tree (an agent and its subagents, or one conversation), so
that a run meets no prefix cache an earlier run warmed (a trial, a sweep level, the other side of an A/B on one
engine) while a tree's own requests still share theirs. Applied to the bodies as they are made: the plan, counted
once per command, stays the same."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

from loadrepro.workload.model import Body, Conversation, Workload


@dataclass(frozen=True, slots=True)
class _Marked:
    """A body step: the marker before its first message's text (or its prompt). Picklable, for workers."""

    marker: str

    def __call__(self, body: Body) -> Body:
        if "prompt" in body and isinstance(body["prompt"], str):
            return {**body, "prompt": self.marker + body["prompt"]}
        messages = body.get("messages")
        if not messages or not isinstance(messages[0].get("content"), str):
            return body
        first = {**messages[0], "content": self.marker + messages[0]["content"]}
        return {**body, "messages": [first, *messages[1:]]}


def marker(salt: str, tree: int) -> str:
    return f"[rid:{hashlib.blake2b(f'{salt}:{tree}'.encode(), digest_size=6).hexdigest()}]\n\n"


def busted(workload: Workload, salt: str) -> Workload:
    """Every request with its tree's marker (`salt`: the run's own, so that no two runs share one)."""
    def marked(c: Conversation) -> Conversation:
        step = _Marked(marker(salt, c.root))
        return dataclasses.replace(c, turns=tuple(t.then(step) for t in c.turns))

    roots = {c.index: c.root for c in workload.conversations}  # a warm-up carries its tree's marker too
    return dataclasses.replace(workload, conversations=tuple(marked(c) for c in workload.conversations),
                               warmups=tuple(w.then(_Marked(marker(salt, roots[w.conversation])))
                                             for w in workload.warmups))
