"""A release matrix: the same battery against several builds, one after another (each phase of each on an engine
started afresh), and one table of phases x builds with the first phase each build failed."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loadrepro.report.stress import write_matrix
from loadrepro.runs.progress import Say
from loadrepro.runs.run_options import RunOptions
from loadrepro.schema.stress_report import MatrixBuild, MatrixReport, StressReport
from loadrepro.stress.battery import run_battery
from loadrepro.stress.phases import Phase


@dataclass(frozen=True, slots=True)
class Matrix:
    report: MatrixReport
    batteries: list[StressReport]
    written: list[Path]
    errors: int


def _build(label: str, command: str, r: StressReport, root: Path) -> MatrixBuild:
    return MatrixBuild(label=label, engine_cmd=command, stress_dir=str(root),
                       verdicts={p.name: p.verdict for p in r.phases},
                       rules={p.name: p.rules_fired for p in r.phases if p.rules_fired},
                       first_failure=r.first_failure, target_error=r.target_error, wall_s=r.wall_s)


async def run_matrix(options: RunOptions, builds: Sequence[tuple[str, str]], phases: Sequence[Phase], root: Path,
                     say: Say) -> Matrix:
    """Each (label, engine command)'s battery in `root`/LABEL; matrix.json, matrix.md, matrix.html, junit.xml."""
    began = time.monotonic()
    done: list[MatrixBuild] = []
    batteries: list[StressReport] = []
    errors, interrupted = 0, False
    for label, command in builds:
        say(f"stress matrix: {label} ({command})")
        build = dataclasses.replace(options, engine_cmd=command, label=label, base_url=None)
        battery = await run_battery(build, phases, root / label, say)
        batteries.append(battery.report)
        done.append(_build(label, command, battery.report, root / label))
        errors += battery.errors
        if battery.report.interrupted:
            interrupted = True
            break
    report = MatrixReport(command=options.command, phases=[p.name for p in phases], builds=done,
                          wall_s=round(time.monotonic() - began, 2), interrupted=interrupted)
    return Matrix(report, batteries, write_matrix(report, batteries, root), errors)
