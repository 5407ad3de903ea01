"""`run --dry-run`: plan the workload against the target's tokenizer, show it, optionally save it; send no load."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadrepro.config.profile import Profile
from loadrepro.load.planning import plan_on_target
from loadrepro.load.target import discover_model
from loadrepro.load.transport import Transport
from loadrepro.runs.progress import Say
from loadrepro.workload.export import PLAIN_WORKLOAD_FILE, compress_workload, write_workload
from loadrepro.workload.plan import Plan
from loadrepro.workload.summary import WorkloadSummary, summarize


@dataclass(frozen=True, slots=True)
class DryRun:
    plan: Plan
    summary: WorkloadSummary
    written: Path | None


async def dry_run(profile: Profile, base_url: str | None, model: str | None, out: Path | None,
                  tokenizer: Path | None = None, api_key: str | None = None, say: Say = print) -> DryRun:
    """Planned as a run plans (load/planning.py): in a local tokenizer's tokens, in the simulated engine's when
    there is no base URL (it would be the target), else in the target's, with the same fallbacks."""
    if base_url is None:
        plan, _ = await plan_on_target(profile, None, model or profile.model, tokenizer, say)
    else:
        async with Transport(base_url, api_key) as http:
            name = model or profile.model or await discover_model(http)
            plan, _ = await plan_on_target(profile, http, name, tokenizer, say)
    written = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        written = compress_workload(write_workload(plan.workload, out / PLAIN_WORKLOAD_FILE))
    return DryRun(plan, summarize(plan), written)
