"""`run --dry-run`: plan the workload against the target's tokenizer, show it, optionally save it; send no load."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


from loadrepro.drive.control import control_client
from loadrepro.profile import Profile
from loadrepro.drive.target import discover_model
from loadrepro.workload.export import write_workload
from loadrepro.workload.plan import Plan, plan_workload
from loadrepro.workload.summary import WorkloadSummary, summarize
from loadrepro.workload.tokens import LocalTokenizerCounter, SimTokenCounter, detect_counter


@dataclass(frozen=True, slots=True)
class DryRun:
    plan: Plan
    summary: WorkloadSummary
    written: Path | None


async def dry_run(profile: Profile, base_url: str | None, model: str | None, out: Path | None,
                  tokenizer: Path | None = None, api_key: str | None = None) -> DryRun:
    """With a local tokenizer, plan offline in its tokens; without a base URL the target is the embedded simulated
    engine, whose tokenizer runs in process; else ask the target to count."""
    if tokenizer is not None:
        plan = await plan_workload(profile, LocalTokenizerCounter(tokenizer))
    elif base_url is None:
        plan = await plan_workload(profile, SimTokenCounter())
    else:
        async with control_client(base_url, 60, api_key) as client:
            name = model or profile.model or await discover_model(client)
            plan = await plan_workload(profile, await detect_counter(client, name, profile.api))
    written = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        written = write_workload(plan.workload, out / "workload.jsonl.gz")
    return DryRun(plan, summarize(plan), written)
