"""What `run` and `ab` do, whoever asked (the command line or the API): one run, or --trials of it, each on a
fresh engine. Both callers take the same result, so neither branches on trials."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loadrepro.runs.progress import Say
from loadrepro.runs.run_options import RunOptions
from loadrepro.runs.session import run_session

if TYPE_CHECKING:  # trials and A/B import what they compare with when they run: one run never waits on it
    from loadrepro.compare.comparison import Comparison
    from loadrepro.runs.ab import Side
    from loadrepro.schema.report_kinds import VerdictStatus
    from loadrepro.schema.run_report import RunReport


@dataclass(frozen=True, slots=True)
class RunDone:
    report: RunReport  # the run's, or for trials their summary (a representative trial's, `trials` filled in)
    run_dir: Path
    written: list[Path]  # the report files
    interrupted: bool  # a signal ended it; what ran before is reported


@dataclass(frozen=True, slots=True)
class AbDone:
    comparison: Comparison
    sides: list[tuple[str, VerdictStatus, Path]]  # each side's label, verdict and run directory (one run a side)
    written: list[Path]  # the comparison's files (one run a side)
    interrupted: bool


async def run_any(options: RunOptions, say: Say) -> RunDone:
    if options.trials > 1:
        from loadrepro.runs.repeats import run_trials

        trials = await run_trials(options, say=say)
        return RunDone(trials.report, trials.run_dir, trials.written, trials.interrupted)
    session = await run_session(options, say=say)  # the verdict is told before the pictures are drawn
    return RunDone(session.report, session.run_dir, session.written, session.result.interrupted)


async def ab_any(options: RunOptions, stock: Side, patched: Side, say: Say) -> AbDone:
    from loadrepro.runs.ab import run_ab
    from loadrepro.runs.repeats import run_ab_trials

    if options.trials > 1:
        trials = await run_ab_trials(options, stock, patched, say=say)
        return AbDone(trials.comparison, [], [], trials.interrupted)
    ab = await run_ab(options, stock, patched, say=say)
    sides = [(s.report.label, s.report.verdict, s.run_dir) for s in (ab.stock, ab.patched)]
    return AbDone(ab.comparison, sides, ab.written, False)
