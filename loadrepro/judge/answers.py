"""Answers under load judged against the same request alone ([verify]), and the rules that fail a run on them.
Pure.

A load answer and its reference (the same request, temperature 0, sent alone on the idle engine afterwards) are
compared position by position over their first `compare_tokens` tokens. Where they first differ, the reference's
logprobs say how sure the engine was: a token that led its runner-up by at least `min_margin` nats does not flip
under batching's floating-point noise, so a different token there is a wrong answer (`diverged`); one that led by
less is a `near_tie`, which batching flips on healthy engines (reported, never a failure). Without logprobs a
difference cannot be told from a near-tie (`unverifiable`). Before any of that, an answer with U+FFFD, a runaway
repeated token or no text for its counted tokens, where the reference has none of it, is `garbled`; one carrying
another conversation's tag is `cross_talk`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace

from loadrepro.config.profile import VerdictSpec, VerifySpec
from loadrepro.judge.findings import Finding, Severity
from loadrepro.judge.measurements import Measurements
from loadrepro.records import Answer, AnswerCheck, Outcome, RequestRecord, RunResult, Verification

RUNAWAY = 16  # the same token this many times in a row is a runaway
END = ""  # the token past an answer's end


def choose(records: Iterable[RequestRecord], spec: VerifySpec, seed: int) -> list[RequestRecord]:
    """The completed requests to check: all of them, or `spec.sample` drawn with the run's seed, cache hits first
    (a later turn that found its prefix cached is where a corrupted cache answers wrongly)."""
    done = sorted((r for r in records if r.outcome is Outcome.OK and r.answer is not None), key=lambda r: r.id)
    if spec.outputs == "all":
        return done
    rng = random.Random(seed)
    hits = [r for r in done if (r.cached_tokens or 0) > 0]
    rest = [r for r in done if (r.cached_tokens or 0) <= 0]
    rng.shuffle(hits)
    rng.shuffle(rest)
    return sorted((hits + rest)[:spec.sample], key=lambda r: r.id)


def _longest_run(tokens: Iterable[str]) -> int:
    longest = count = 0
    previous: str | None = None
    for token in tokens:
        count = count + 1 if token == previous else 1
        previous, longest = token, max(longest, count)
    return longest


def _pieces(answer: Answer) -> tuple[str, ...]:
    """The answer's tokens, or its words when it has no logprobs."""
    return answer.tokens or tuple(answer.text.split())


def garbled(load: RequestRecord, reference: Answer) -> str | None:
    """Why the load answer is garbled where its reference is not, or None."""
    answer = load.answer
    assert answer is not None
    if "\ufffd" in answer.text and "\ufffd" not in reference.text:
        return f"U+FFFD (an undecodable byte) at character {answer.text.index(chr(0xFFFD))}"
    run = _longest_run(_pieces(answer))
    if run >= RUNAWAY and run > _longest_run(_pieces(reference)):
        return f"one token repeated {run} times in a row"
    if answer.chars == 0 and (load.completion_tokens or 0) > 0 and reference.chars > 0:
        return f"no text, with {load.completion_tokens} completion tokens counted"
    return None


def foreign_marker(text: str, own: str | None, markers: Mapping[str, int], pattern: re.Pattern[str]) -> str | None:
    """Another conversation's tag in `text`, or None."""
    for match in pattern.finditer(text):
        if match.group(0) != own and match.group(0) in markers:
            return match.group(0)
    return None


def compare(load: Answer, reference: Answer, spec: VerifySpec) -> tuple[str, int | None, str, str, float | None]:
    """(kind, position, load token, reference token, margin) of two answers that are neither garbled nor mixed."""
    if not load.tokens or not reference.tokens:
        same = load.text == reference.text
        return ("identical" if same else "unverifiable"), None, "", "", None
    n = spec.compare_tokens
    ours, theirs = load.tokens[:n], reference.tokens[:n]
    position = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
    if position is None:
        if len(ours) == len(theirs):
            return "identical", None, "", "", None
        position = min(len(ours), len(theirs))  # one ended where the other went on
    mine = ours[position] if position < len(ours) else END
    right = theirs[position] if position < len(theirs) else END
    margin = reference.margin(position) if position < len(theirs) else None
    if margin is None:
        return "unverifiable", position, mine, right, None
    return ("diverged" if margin >= spec.min_margin else "near_tie"), position, mine, right, margin


def check(load: RequestRecord, reference: RequestRecord | None, spec: VerifySpec, markers: Mapping[str, int],
          pattern: re.Pattern[str]) -> AnswerCheck:
    """One load answer against its reference (None: the request was not sent again)."""
    assert load.answer is not None
    base = AnswerCheck(load.id, load.conversation, load.turn, "unverifiable", cached_tokens=load.cached_tokens)
    own = next((m for m, c in markers.items() if c == load.conversation), None)
    if reference is None or reference.answer is None:
        why = "no reference" if reference is None else f"its reference ended {reference.outcome.value}"
        return replace(base, detail=f"{why}: {reference.detail[:200]}" if reference and reference.detail else why)
    ref = reference.answer
    kind, position, mine, right, margin = compare(load.answer, ref, spec)
    compared = replace(base, kind=kind, position=position, load_token=mine, reference_token=right,
                       margin=None if margin is None else round(margin, 4))
    # A cross-talk or garbled answer is named so, with where it first differed kept: wrong_output counts it too.
    foreign = foreign_marker(load.answer.text, own, markers, pattern)
    if foreign is not None and foreign not in ref.text:
        return replace(compared, kind="cross_talk",
                       detail=f"carries {foreign}, the tag of conversation {markers[foreign]}")
    broken = garbled(load, ref)
    return replace(compared, kind="garbled", detail=broken) if broken is not None else compared


def _first(checks: Verification, kind: str) -> tuple[list[AnswerCheck], AnswerCheck | None]:
    found = [c for c in checks.checks if c.kind == kind]
    return found, min(found, key=lambda c: c.request, default=None)


def _cached(c: AnswerCheck) -> str:
    if c.cached_tokens is None:
        return "the target reported no cached tokens for it"
    if c.cached_tokens > 0:
        return f"{c.cached_tokens:,} of its prompt tokens were served from the prefix cache"
    return "none of its prompt came from the prefix cache"


def _shown(token: str) -> str:
    return repr(token) if token else "the answer's end"


def wrong_output(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """Answers under load that differ from the same request alone where the engine was sure of its token (led its
    runner-up by at least [verify] min_margin nats): wrong answers. Threshold: one."""
    answers = measured.answers.checks
    found = [c for c in answers if c.wrong(measured.answers.spec)]
    c = min(found, key=lambda c: c.request, default=None)
    if c is None or c.margin is None:
        return None
    return Finding("wrong_output", Severity.FAIL,
                   f"{len(found)}/{len(answers)} checked answers were wrong under load (first: request "
                   f"{c.request}, conversation {c.conversation} turn {c.turn}: at output position {c.position} it "
                   f"answered {_shown(c.load_token)} where alone it answers {_shown(c.reference_token)}, which led its "
                   f"runner-up by {c.margin:.2f} nats; {_cached(c)})")


def garbled_output(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """Answers under load that are garbled (U+FFFD, a runaway repeated token, no text for counted tokens) where
    the same request alone is not. Threshold: one."""
    found, c = _first(measured.answers, "garbled")
    if c is None:
        return None
    checked = len(measured.answers.checks)
    return Finding("garbled_output", Severity.FAIL,
                   f"{len(found)}/{checked} checked answers were garbled under load (first: request "
                   f"{c.request}: {c.detail}; alone it answers cleanly)")


def cross_talk(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """An answer under load carries another conversation's unique tag: it was computed from another request's
    context. Threshold: one."""
    found, c = _first(measured.answers, "cross_talk")
    if c is None:
        return None
    checked = len(measured.answers.checks)
    return Finding("cross_talk", Severity.FAIL,
                   f"{len(found)}/{checked} checked answers carried another conversation's tag (first: "
                   f"request {c.request}, conversation {c.conversation}: {c.detail}; {_cached(c)})")


ANSWER_RULES = (wrong_output, garbled_output, cross_talk)
