"""From a profile and a token counter to a verified Workload: calibrate, build, check a sample, correct once."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadrepro.config.profile import Profile
from loadrepro.workload.apis import chat_form, deterministic
from loadrepro.workload.assemble import Assembler
from loadrepro.workload.conversations import build_conversations, planned_prompt_tokens, sampled_conversations
from loadrepro.workload.corpus import RecordPool, record_pool
from loadrepro.workload.model import PlannedRequest, Workload
from loadrepro.workload.probes import ProbeBudget, calibrate_by_probes, probe_pool
from loadrepro.workload.tokens import Calibration, SimTokenCounter, TokenCounter, calibrate, gather_limited

if TYPE_CHECKING:  # a trace's readers and builder are imported only by a workload that is one (see trace_of)
    from loadrepro.workload.trace import Trace

TOLERANCE = 0.02
_CORRECT_ABOVE = 0.005  # a sample further off than this triggers one rebuild with measured costs
_VERIFY_SAMPLE = 32  # conversations counted to decide whether every one must be


@dataclass(frozen=True, slots=True)
class Check:
    conversation: int
    turn: int
    expected: int
    actual: int

    @property
    def error(self) -> float:
        return (self.actual - self.expected) / self.expected


@dataclass(frozen=True, slots=True)
class Plan:
    workload: Workload
    calibration: Calibration
    checks: tuple[Check, ...]  # the target's own count of a sample of prompts
    probe_requests: int = 0  # requests sent to the engine to count tokens (no tokenize endpoint)
    probe_tokens: int = 0

    @property
    def within_tolerance(self) -> bool:
        return all(abs(c.error) <= TOLERANCE for c in self.checks)


def trace_of(profile: Profile) -> Trace | None:
    """The rows a trace or agents workload sends (None: conversations)."""
    kind = profile.workload.kind
    if kind not in ("trace", "agents"):
        return None
    from loadrepro.workload.trace import agent_trace, read_trace  # eight modules of formats and readers

    return read_trace(profile.workload) if kind == "trace" else agent_trace(profile.workload)


def build_workload(profile: Profile, pool: RecordPool, calibration: Calibration,
                   trace: Trace | None = None, corrections: dict[int, float] | None = None,
                   only: set[int] | None = None) -> Workload:
    """Pure: the same inputs always give byte-identical request bodies. `only` (conversations): those
    conversations alone, each as the whole workload would have it."""
    assembler = Assembler(pool, calibration)
    if trace is None:
        trace = trace_of(profile)
    if trace is not None:
        from loadrepro.workload.trace import build_trace

        workload = build_trace(trace, profile.workload, profile.api, assembler)
    else:
        workload = _with_session_headers(build_conversations(profile.workload, profile.api, assembler, corrections,
                                                             only), profile.workload.session_header)
    return workload if profile.verify.outputs == "off" else _deterministic(workload, profile)


def _with_session_headers(workload: Workload, name: str) -> Workload:
    """[workload] session_header: each conversation's requests carry conversation-N under that name (a trace's
    rows carry their session's own: workload/trace.py)."""
    if not name:
        return workload
    return dataclasses.replace(workload, conversations=tuple(dataclasses.replace(c, turns=tuple(
        dataclasses.replace(r, headers=((name, f"conversation-{c.index}"),)) for r in c.turns))
        for c in workload.conversations))


def _deterministic(workload: Workload, profile: Profile) -> Workload:
    """Every request asks for its one greedy answer and its logprobs, so that answers can be checked."""
    step = functools.partial(deterministic, profile.api, seed=profile.workload.seed,
                             top=profile.verify.top_logprobs)
    return dataclasses.replace(workload, conversations=tuple(
        dataclasses.replace(c, turns=tuple(r.then(step) for r in c.turns)) for c in workload.conversations))


def _checked_part(profile: Profile, pool: RecordPool, calibration: Calibration, trace: Trace | None) -> Workload:
    """What a check counts of the workload: of conversations, those holding its sample alone, built before the whole
    is (a calibration found off builds the whole again: a fifth of a second for 2,000 conversations); a trace whole."""
    if profile.workload.kind != "conversations":
        return build_workload(profile, pool, calibration, trace)
    only = sampled_conversations(profile.workload, profile.api, calibration)
    return build_workload(profile, pool, calibration, trace, only=only)


def _sample(workload: Workload) -> list[PlannedRequest]:
    requests = workload.requests
    picks = {0, len(requests) - 1, max(range(len(requests)), key=lambda i: requests[i].expected_prompt_tokens)}
    return [requests[i] for i in sorted(picks)]


async def _count(counter: TokenCounter, request: PlannedRequest) -> int:
    body = request.payload()
    return await (counter.count_chat(body["messages"]) if "messages" in body else counter.count_text(body["prompt"]))


async def _check(counter: TokenCounter, workload: Workload) -> tuple[Check, ...]:
    sample = _sample(workload)
    actual = await asyncio.gather(*(_count(counter, r) for r in sample))
    return tuple(Check(r.conversation, r.turn, r.expected_prompt_tokens, a) for r, a in zip(sample, actual))


async def _plan_by_probes(profile: Profile, counter: TokenCounter, pool: RecordPool,
                          trace: Trace | None) -> Plan:
    """Calibrate with salted probes within a budget drawn from the workload's size, measured first in the simulated
    engine's tokens (free); no run prompt is counted on the target, since that would send it."""
    budget = ProbeBudget.for_workload(await _planned_tokens(profile, pool, trace))
    calibration, requests, tokens = await calibrate_by_probes(
        counter, probe_pool(profile.workload.seed), chat_form(profile.api), budget)
    return Plan(build_workload(profile, pool, calibration, trace), calibration, (), requests, tokens)


async def _planned_tokens(profile: Profile, pool: RecordPool, trace: Trace | None) -> int:
    """The workload's prompt tokens, planned in the simulated engine's tokens (counted free, in process)."""
    calibration = await calibrate(SimTokenCounter(), pool)
    if profile.workload.kind == "conversations":  # without assembling a text (a fifth of a second for 2,000)
        return planned_prompt_tokens(profile.workload, profile.api, calibration)
    return sum(r.expected_prompt_tokens for r in build_workload(profile, pool, calibration, trace).requests)


async def plan_workload(profile: Profile, counter: TokenCounter) -> Plan:
    pool = record_pool(profile.workload.seed)
    trace = trace_of(profile)
    if counter.probing:
        return await _plan_by_probes(profile, counter, pool, trace)
    calibration = await calibrate(counter, pool)
    checked = _checked_part(profile, pool, calibration, trace)
    checks = await _check(counter, checked)
    if any(abs(c.error) > _CORRECT_ABOVE for c in checks):
        factor = sum(c.actual for c in checks) / sum(c.expected for c in checks)
        calibration = calibration.scaled(factor)
        workload = build_workload(profile, pool, calibration, trace)
        checks = await _check(counter, workload)
    elif profile.workload.kind == "conversations":  # the checked requests come out of the whole byte for byte
        workload = build_workload(profile, pool, calibration, trace)
    else:
        workload = checked
    if workload.kind == "conversations" and not counter.additive:
        workload = await _correct_each_conversation(profile, pool, calibration, counter, workload)
        checks = await _check(counter, workload)
    return Plan(workload, calibration, checks)


async def _correct_each_conversation(profile: Profile, pool: RecordPool, calibration: Calibration,
                                     counter: TokenCounter, workload: Workload) -> Workload:
    """Count a spread sample of conversations' first prompts on the target; when one of them is off by more than
    0.5%, count every conversation's and rebuild those that are off with their own documents lengthened or
    shortened by the difference. Counting costs the target a request per prompt, so a workload whose sample is
    already right is not counted whole (each run's lengths are checked against usage anyway: report lengths)."""
    firsts = [c.turns[0] for c in workload.conversations]
    picked = _spread(len(firsts), _VERIFY_SAMPLE)
    counts = dict(zip(picked, await gather_limited([_count(counter, firsts[i]) for i in picked])))
    if not _corrections([firsts[i] for i in picked], [counts[i] for i in picked]):
        return workload
    rest = [i for i in range(len(firsts)) if i not in counts]
    counts.update(zip(rest, await gather_limited([_count(counter, firsts[i]) for i in rest])))
    corrections = _corrections(firsts, [counts[i] for i in range(len(firsts))])
    # Only the conversations that were off are built again: the others would come out byte for byte the same.
    rebuilt = {c.index: c for c in build_workload(profile, pool, calibration, None, corrections,
                                                  set(corrections)).conversations}
    return dataclasses.replace(workload, conversations=tuple(
        rebuilt.get(c.index, c) for c in workload.conversations))


def _spread(n: int, most: int) -> list[int]:
    """At most `most` of the indices 0..n-1, evenly spread, always with the first and the last."""
    if n <= most:
        return list(range(n))
    return sorted({round(i * (n - 1) / (most - 1)) for i in range(most)})


def _corrections(requests: list[PlannedRequest], counts: list[int]) -> dict[int, float]:
    return {r.conversation: float(r.expected_prompt_tokens - a) for r, a in zip(requests, counts)
            if abs(a - r.expected_prompt_tokens) > _CORRECT_ABOVE * r.expected_prompt_tokens}
