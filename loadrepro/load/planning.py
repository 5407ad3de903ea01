"""Planning a workload for a target, for a run and a dry run alike: lengths counted in a local tokenizer's tokens
when one is given, in the simulated engine's when that is the target, else in the target's own (its tokenize
endpoint, or salted probe requests); a target that cannot count gets estimates, said in a note. A target that
refuses for authentication is an error, never a reason to estimate (errors.TargetRefused)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadrepro.config.profile import Api, Profile, VerifySpec
from loadrepro.config.workload_spec import WorkloadSpec
from loadrepro.errors import TargetError
from loadrepro.load.transport import Transport
from loadrepro.workload.plan import Plan, plan_workload
from loadrepro.workload.tokens import LocalTokenizerCounter, SimTokenCounter, detect_counter

REUSED = ("workload: planned by an earlier run of this command (the same workload on the same engine), so no prompt "
          "was counted again")


@dataclass(frozen=True, slots=True)
class _Planned:
    """What a plan depends on: the target's tokens (which engine counts them, and how) and the parts of the profile
    that plan_workload reads."""

    engine: str | None  # the engine's command, or its URL when loadrepro did not start it; None: the simulated one
    model: str
    tokenizer: Path | None
    workload: WorkloadSpec
    api: Api
    verify: VerifySpec


@dataclass(slots=True)
class PlanMemo:
    """The plans made for one command's runs (the trials of --trials, stock's and patched's alternately; the levels
    of a sweep): a run sending the same workload to the same engine takes its plan again instead of counting every
    prompt on the target again (2,000 counts, a second or more, with the requests they send it). The last two kept,
    one per side of an A/B."""

    _kept: list[tuple[_Planned, Plan, list[str]]] = dataclasses.field(default_factory=list)  # compared, not hashed

    def get(self, key: _Planned) -> tuple[Plan, list[str]] | None:
        return next(((plan, list(notes)) for k, plan, notes in self._kept if k == key), None)

    def keep(self, key: _Planned, plan: Plan, notes: list[str]) -> None:
        self._kept = [kept for kept in self._kept[-1:] if kept[0] != key] + [(key, plan, list(notes))]


async def plan_on_target(
        profile: Profile, http: Transport | None, model: str, tokenizer: Path | None,
        say: Callable[[str], None], memo: PlanMemo | None = None, engine: str | None = None) -> tuple[Plan, list[str]]:
    """The plan and the notes a report should carry; `http` None: count in the simulated engine's tokens (it is the
    target, in this process's tokenizer). Where the workload came from (a trace's format) is said and noted. With a
    memo, `engine` names what counts the tokens: the command that started it (its URL when not given)."""
    counted_by = (engine or http.base_url) if http is not None else None
    key = _Planned(counted_by, model, tokenizer, profile.workload, profile.api, profile.verify)
    kept = memo.get(key) if memo is not None else None
    if kept is not None:  # this run sent no counting request: its report says so, and none it did not send
        plan, notes = dataclasses.replace(kept[0], probe_requests=0, probe_tokens=0), kept[1] + [REUSED]
    else:
        plan, notes = await _planned(profile, http, model, tokenizer, say)
        # Not kept: a trace's (its file may change), nor one the target could not count (it may next time).
        if memo is not None and profile.workload.kind == "conversations" and not notes:
            memo.keep(key, plan, notes)
    if plan.workload.origin:
        say(plan.workload.origin)
        notes.insert(0, plan.workload.origin)
    return plan, notes


async def _planned(profile: Profile, http: Transport | None, model: str, tokenizer: Path | None,
                   say: Callable[[str], None]) -> tuple[Plan, list[str]]:
    if tokenizer is not None:
        return await plan_workload(profile, LocalTokenizerCounter(tokenizer)), []
    if http is None:
        return await plan_workload(profile, SimTokenCounter()), []
    try:
        counter = await detect_counter(http, model, profile.api)
        if counter.probing:
            say("workload: the target has no tokenize endpoint; counting with salted probe requests, one at a time, "
                "within 5% of the workload's prompt tokens")
        return await plan_workload(profile, counter), []
    except TargetError as exc:
        note = (f"workload: token lengths are estimates in the simulated engine's tokens, because the target could "
                f"not count them: {exc}")
        say(note)
        return await plan_workload(profile, SimTokenCounter()), [note]
