"""An answer's evidence, gathered from the events of a stream or a whole response ([verify]): the content's text
(bounded) and, per output position up to `compare_tokens`, the chosen token, its logprob and the best other one's.
Pure.

Where each API puts logprobs (asked for with workload.apis.deterministic):
- chat completions: `choices[0].logprobs.content` = [{token, logprob, top_logprobs: [{token, logprob}]}]
- completions: `choices[0].logprobs` = {tokens, token_logprobs, top_logprobs: [{token: logprob}]}
- Responses: each `response.output_text.delta` event's `logprobs`, shaped as chat's
- Messages: none (answers are then compared by text alone: a difference cannot be told from a near-tie)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadrepro.records import ANSWER_CHARS, Answer


@dataclass(slots=True)
class AnswerParts:
    """An answer being read."""

    compare_tokens: int
    limit: int | None = ANSWER_CHARS  # characters of content kept (None: all, for a live history)
    text: list[str] = field(default_factory=list)
    chars: int = 0
    tokens: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    runner_up: list[float | None] = field(default_factory=list)
    runner_token: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)  # the first tool call's arguments, as they came
    argument_chars: int = 0

    def content(self, text: str) -> None:
        if self.limit is None:
            self.text.append(text)
        elif self.chars < self.limit:
            self.text.append(text[:self.limit - self.chars])
        self.chars += len(text)

    def whole(self) -> str:
        """The content read (all of it when the limit was lifted)."""
        return "".join(self.text)

    def tool(self, arguments: str) -> None:
        """Kept up to the content's limit, counted as they come (a long call is not summed again per piece)."""
        if self.limit is None or self.argument_chars < self.limit:
            self.arguments.append(arguments)
        self.argument_chars += len(arguments)

    def tool_call(self) -> str | None:
        """The first tool call's arguments (None: the answer called no tool)."""
        return "".join(self.arguments) if self.arguments else None

    def position(self, token: str, logprob: float, others: list[tuple[str, float]]) -> None:
        """One output position: the chosen token and the top alternatives the engine listed (it among them)."""
        if len(self.tokens) >= self.compare_tokens:
            return
        rest = list(others)
        for i, (other, value) in enumerate(rest):  # the chosen token itself is listed once: leave it out
            if other == token and abs(value - logprob) < 1e-6:
                del rest[i]
                break
        best = max(rest, key=lambda pair: pair[1], default=None)
        self.tokens.append(token)
        self.logprobs.append(logprob)
        self.runner_up.append(best[1] if best else None)
        self.runner_token.append(best[0] if best else "")

    def done(self) -> Answer:
        return Answer("".join(self.text)[:ANSWER_CHARS], self.chars, tuple(self.tokens), tuple(self.logprobs),
                      tuple(self.runner_up), tuple(self.runner_token))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def chat_logprobs(logprobs: Any, parts: AnswerParts) -> None:
    """Chat completions' (and a Responses delta's) list of positions."""
    entries = logprobs.get("content") if isinstance(logprobs, dict) else logprobs
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict) or (chosen := _number(entry.get("logprob"))) is None:
            continue
        top = entry.get("top_logprobs")
        others = [(str(t.get("token")), v) for t in top if isinstance(t, dict)
                  and (v := _number(t.get("logprob"))) is not None] if isinstance(top, list) else []
        parts.position(str(entry.get("token")), chosen, others)


def completions_logprobs(logprobs: Any, parts: AnswerParts) -> None:
    """Completions' parallel lists: tokens, token_logprobs, top_logprobs (a {token: logprob} per position)."""
    if not isinstance(logprobs, dict):
        return
    tokens, values = logprobs.get("tokens") or [], logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    for i, (token, value) in enumerate(zip(tokens, values, strict=False)):
        chosen = _number(value)
        if chosen is None:
            continue
        top = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
        parts.position(str(token), chosen, [(str(t), v) for t, raw in top.items() if (v := _number(raw)) is not None])
