"""`loadrepro shrink`: search, confirm, and leave a bug report's reproducer in the shrink directory: the minimal
profile.toml, its failing run directory, bundle.zip and shrink.md."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadrepro.config.defaults import SHRINK_MAX_TRIALS, SHRINK_TIME_BUDGET_S
from loadrepro.config.profile import Profile
from loadrepro.config.profile_files import write_profile
from loadrepro.errors import UsageError
from loadrepro.report.bundle import make_bundle
from loadrepro.report.json import read_report
from loadrepro.report.timeline import timeline_from_run_dir
from loadrepro.report.write import write_reports
from loadrepro.shrink.attempts import ONCE, Confirm, Failure, Trials
from loadrepro.shrink.output import render_shrink
from loadrepro.shrink.search import Shrinker, Shrunk, knobs_for


@dataclass(frozen=True, slots=True)
class ShrinkOptions:
    profile: Profile
    engine_cmd: str | None  # None: the simulated engine of the profile's [sim] section
    out: Path
    model: str | None = None
    predicate: str | None = None  # a signature name; else the original run's own failure
    max_trials: int = SHRINK_MAX_TRIALS
    time_budget_s: float = SHRINK_TIME_BUDGET_S
    confirm: int = 0  # runs of the minimal workload after the search
    confirm_each: Confirm = ONCE  # --confirm K/N: every candidate judged by K failures in up to N runs


@dataclass(frozen=True, slots=True)
class ShrinkResult:
    shrunk: Shrunk
    wanted: Failure | None
    confirmed: int | None  # failing runs out of `confirm`, when asked
    written: list[Path]


async def shrink(options: ShrinkOptions, say: Callable[[str], None]) -> ShrinkResult:
    out = options.out
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} is not empty: give a new --out for the shrink")
    trials = Trials(out / "trials", options.engine_cmd, options.model,
                    Failure("signature", options.predicate) if options.predicate else None, _reproduce(options),
                    options.confirm_each)
    shrunk = await Shrinker(trials, options.max_trials, options.time_budget_s, say).shrink(options.profile)
    if trials.wanted is None or not shrunk.best.failed:
        shutil.rmtree(out / "trials", ignore_errors=True)
        wanted = "" if options.predicate is None else f" with {options.predicate}"
        raise UsageError(f"the workload does not fail{wanted}"
                         f" ({shrunk.best.how}): there is nothing to shrink")
    confirmed = None
    if options.confirm and not shrunk.interrupted:
        try:
            confirmed = await _confirm(options, shrunk.profile, trials.wanted, say)
        except KeyboardInterrupt:  # the minimal workload is written, unconfirmed
            shrunk.stopped, shrunk.interrupted = f"{shrunk.stopped}; its confirmation interrupted", True
    return ShrinkResult(shrunk, trials.wanted, confirmed, _write(options, shrunk, trials.wanted, confirmed))


def _reproduce(options: ShrinkOptions) -> str:
    engine = f" --engine-cmd {shlex.quote(options.engine_cmd)}" if options.engine_cmd else ""
    return f"loadrepro run --profile {shlex.quote(str(options.out / 'profile.toml'))}{engine}"


async def _confirm(options: ShrinkOptions, profile: Profile, wanted: Failure, say: Callable[[str], None]) -> int:
    """Run the minimal workload `confirm` more times: a flaky failure shows as fewer than all."""
    again = Trials(options.out / "confirm", options.engine_cmd, options.model, wanted)
    failed = 0
    try:
        for i in range(options.confirm):
            failed += (await again(profile)).failed
            say(f"confirm {i + 1}/{options.confirm}: {failed} failed so far")
    finally:
        shutil.rmtree(options.out / "confirm", ignore_errors=True)
    return failed


def _write(options: ShrinkOptions, shrunk: Shrunk, wanted: Failure, confirmed: int | None) -> list[Path]:
    out = options.out
    run = out / "run"
    shutil.move(str(shrunk.best.run_dir), run)
    shutil.rmtree(out / "trials", ignore_errors=True)
    report = read_report(run)
    write_reports(report, run, timeline_from_run_dir(run, report))  # the trials drew no pictures
    profile = write_profile(shrunk.profile, out / "profile.toml")
    bundle = make_bundle(run, out / "bundle.zip")
    markdown = out / "shrink.md"
    markdown.write_text(render_shrink(options.profile, shrunk, str(wanted), confirmed, options.confirm,
                                      report, knobs_for(options.profile), options.confirm_each), encoding="utf-8")
    return [profile, run, bundle, markdown]
