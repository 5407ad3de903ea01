"""`loadrepro shrink`: search, confirm, and leave a bug report's reproducer in the shrink directory: the minimal
profile.toml, its failing run directory, bundle.zip and shrink.md."""

from __future__ import annotations

import asyncio
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadrepro.config.defaults import ENGINE_START_TIMEOUT_S, SHRINK_MAX_TRIALS, SHRINK_TIME_BUDGET_S
from loadrepro.config.profile import Profile
from loadrepro.config.profile_files import write_profile
from loadrepro.errors import LoadreproError, TargetError, UsageError
from loadrepro.report.bundle import make_bundle
from loadrepro.report.json import read_report
from loadrepro.report.timeline import timeline_from_run_dir
from loadrepro.report.write import write_reports
from loadrepro.runs.run_facts import engine_template
from loadrepro.shrink.attempts import ONCE, Confirm, Failure, Trials
from loadrepro.shrink.output import render_first_interrupted, render_shrink, render_unshrunk, shrunk_description
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
    engine_start_timeout_s: float = ENGINE_START_TIMEOUT_S  # each trial's engine, within the time budget


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
                    options.confirm_each, options.engine_start_timeout_s)
    shrinker = Shrinker(trials, options.max_trials, options.time_budget_s, say)
    try:
        shrunk = await shrinker.shrink(options.profile)
    except KeyboardInterrupt:  # during the first trial: nothing found yet, which shrink.md says
        shutil.rmtree(out / "trials", ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / "shrink.md").write_text(render_first_interrupted(options.profile), encoding="utf-8")
        raise
    if trials.wanted is None or not shrunk.best.failed:
        _tidy(out, shrunk)
        raise _unshrunk(options, shrunk)
    if "\n" in (last := shrunk.steps[-1].trial).stops:  # what the stop's first line cannot say: a log's tail
        say(last.stops)
    confirmed = None
    if options.confirm and not shrunk.interrupted and not shrunk.cut:
        try:
            async with asyncio.timeout_at(shrinker.deadline):
                confirmed = await _confirm(options, shrunk.profile, trials.wanted, say)
        except KeyboardInterrupt:  # the minimal workload is written, unconfirmed
            shrunk.stopped, shrunk.interrupted = f"{shrunk.stopped}; its confirmation interrupted", True
        except TimeoutError:
            shrunk.stopped = f"{shrunk.stopped}; the time budget ran out during its confirmation"
        except TargetError as exc:
            say(str(exc))
            shrunk.stopped = f"{shrunk.stopped}; its confirmation could not run"
    return ShrinkResult(shrunk, trials.wanted, confirmed, _write(options, shrunk, trials.wanted, confirmed))


def _tidy(out: Path, shrunk: Shrunk) -> None:
    """The trials' folders go, but for a trial that could not run: its engine's log is what says why."""
    last = shrunk.steps[-1].trial
    keep = last.run_dir if last.stops and last.run_dir is not None else None
    for folder in (out / "trials").glob("*") if keep is not None else ():
        if folder != keep:
            shutil.rmtree(folder, ignore_errors=True)
    if keep is None:
        shutil.rmtree(out / "trials", ignore_errors=True)


def _unshrunk(options: ShrinkOptions, shrunk: Shrunk) -> LoadreproError:
    """Why there is no minimal workload, written to shrink.md as well: the original workload passed, or its first
    trial could not finish (its engine did not start, the time budget ran out)."""
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "shrink.md").write_text(render_unshrunk(options.profile, shrunk), encoding="utf-8")
    first = shrunk.steps[0].trial
    if first.stops.startswith("the trial could not run"):
        return TargetError(f"{first.stops}\nnothing to shrink (shrink.md: {options.out / 'shrink.md'})")
    if shrunk.cut:
        return UsageError(f"{shrunk.stopped}, before the workload's failure was seen: give a longer --time-budget "
                          f"(shrink.md: {options.out / 'shrink.md'})")
    wanted = "" if options.predicate is None else f" with {options.predicate}"
    return UsageError(f"the workload does not fail{wanted} ({first.how}): there is nothing to shrink")


def _reproduce(options: ShrinkOptions) -> str:
    engine = f" --engine-cmd {shlex.quote(options.engine_cmd)}" if options.engine_cmd else ""
    return f"loadrepro run --profile {shlex.quote(str(options.out / 'profile.toml'))}{engine}"


async def _confirm(options: ShrinkOptions, profile: Profile, wanted: Failure, say: Callable[[str], None]) -> int:
    """Run the minimal workload `confirm` more times: a flaky failure shows as fewer than all."""
    again = Trials(options.out / "confirm", options.engine_cmd, options.model, wanted,
                   engine_start_timeout_s=options.engine_start_timeout_s)
    failed = 0
    try:
        for i in range(options.confirm):
            trial = await again(profile)
            if trial.stops:
                raise TargetError(trial.stops)
            failed += trial.failed
            say(f"confirm {i + 1}/{options.confirm}: {failed} failed so far")
    finally:
        shutil.rmtree(options.out / "confirm", ignore_errors=True)
    return failed


def _write(options: ShrinkOptions, shrunk: Shrunk, wanted: Failure, confirmed: int | None) -> list[Path]:
    out = options.out
    run = out / "run"
    shutil.move(str(shrunk.best.run_dir), run)
    _tidy(out, shrunk)
    # The minimal profile says what it is, in itself, the run's copy and the run's report (the bundle's "What was
    # run"): the original's description tells of a workload many times its size.
    minimal = shrunk.profile.model_copy(update={"description": shrunk_description(options.profile, shrunk)})
    write_profile(minimal, run / "profile.toml")
    report = read_report(run)
    report = report.model_copy(update={"profile": {**report.profile, "description": minimal.description}})
    write_reports(report, run, timeline_from_run_dir(run, report))  # the trials drew no pictures
    profile = write_profile(minimal, out / "profile.toml")
    bundle = make_bundle(run, out / "bundle.zip", engine_template=engine_template(run))
    markdown = out / "shrink.md"
    markdown.write_text(render_shrink(options.profile, shrunk, str(wanted), confirmed, options.confirm,
                                      report, knobs_for(options.profile), options.confirm_each), encoding="utf-8")
    return [profile, run, bundle, markdown]
