"""Planning a workload for a target, for a run and a dry run alike: lengths counted in a local tokenizer's tokens
when one is given, in the simulated engine's when that is the target, else in the target's own (its tokenize
endpoint, or salted probe requests); a target that cannot count gets estimates, said in a note. A target that
refuses for authentication is an error, never a reason to estimate (errors.TargetRefused)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loadrepro.drive.transport import Transport
from loadrepro.errors import TargetError
from loadrepro.profile import Profile
from loadrepro.workload.plan import Plan, plan_workload
from loadrepro.workload.tokens import LocalTokenizerCounter, SimTokenCounter, detect_counter


async def plan_on_target(
        profile: Profile, http: Transport | None, model: str, tokenizer: Path | None,
        say: Callable[[str], None]) -> tuple[Plan, list[str]]:
    """The plan and the notes a report should carry; `http` None: count in the simulated engine's tokens (it is the
    target, in this process's tokenizer). Where the workload came from (a trace's format) is said and noted."""
    plan, notes = await _planned(profile, http, model, tokenizer, say)
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
