"""`run --dry-run`: plan the workload against the target's tokenizer, show it, optionally save it; send no load."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadrepro.load.limits import discover, from_profile, longest_sequence
from loadrepro.load.planning import plan_on_target
from loadrepro.load.target import discover_model
from loadrepro.load.transport import Transport
from loadrepro.runs.progress import Say
from loadrepro.runs.run_options import RunOptions
from loadrepro.runs.sizing import fitted, overrun, predictions, unfit_warning
from loadrepro.workload.export import PLAIN_WORKLOAD_FILE, compress_workload, write_workload
from loadrepro.workload.plan import Plan
from loadrepro.workload.summary import WorkloadSummary, summarize


@dataclass(frozen=True, slots=True)
class DryRun:
    plan: Plan
    summary: WorkloadSummary
    written: Path | None


async def dry_run(options: RunOptions, model: str | None, out: Path | None, say: Say = print) -> DryRun:
    """Planned as a run plans (load/planning.py): in a local tokenizer's tokens, in the simulated engine's when
    there is no base URL (it would be the target), else in the target's, with the same fallbacks; sized as a run
    sizes (--size-to-overrun, --fit) to the limits the target publishes, and what the run would say before its
    load of how many planned requests fit the target said too. Without a base URL no target is probed (no engine
    is started): that is said when the sizing or an engine command asked for one."""
    profile, tokenizer = options.profile, options.tokenizer
    if options.base_url is None:
        if options.fit or options.size_to_overrun or options.engine_cmd:
            say("fit: not checked: a dry run without --base-url starts no engine, so no target's context or KV "
                "limits were read" + ("; --fit and --size-to-overrun not applied"
                                       if options.fit or options.size_to_overrun else ""))
        plan, _ = await plan_on_target(profile, None, model or profile.model, tokenizer, say)
    else:
        async with Transport(options.base_url, options.api_key) as http:
            name = model or profile.model or await discover_model(http)
            limits = from_profile(profile.engine) or await discover(http)
            context = await longest_sequence(http, profile.engine)
            if options.size_to_overrun:
                profile = overrun(profile, limits, options.size_to_overrun, say)
            if options.fit:
                profile, fit_note = fitted(profile, limits, context)
                say(fit_note)
            plan, _ = await plan_on_target(profile, http, name, tokenizer, say)
            unfit = unfit_warning(plan, predictions(plan, profile, limits), context)
            if unfit is not None:
                say(unfit)
    written = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        written = compress_workload(write_workload(plan.workload, out / PLAIN_WORKLOAD_FILE))
    return DryRun(plan, summarize(plan), written)
