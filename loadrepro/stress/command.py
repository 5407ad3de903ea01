"""`loadrepro stress` from its arguments: the phases chosen (built-in, or a profile's [[phases]]), then one battery
against the target, or, with several engine commands, a release matrix."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loadrepro.config.options import StressArguments
from loadrepro.config.profile import PhaseSpec, Profile
from loadrepro.config.profile_files import load_profile, with_overrides
from loadrepro.errors import UsageError
from loadrepro.runs.progress import Say
from loadrepro.runs.run_options import RunOptions, run_directory
from loadrepro.schema.stress_report import Capabilities
from loadrepro.stress.battery import run_battery
from loadrepro.stress.matrix import Matrix, run_matrix
from loadrepro.stress.phases import BY_NAME, PHASES, Phase, Reference, Traffic


@dataclass(frozen=True, slots=True)
class Stressed:
    root: Path
    failed: bool
    interrupted: bool
    errors: int
    written: list[Path]
    conclusion: list[str]


def _own(spec: PhaseSpec, fit: bool) -> Phase:
    """A [[phases]] entry: a built-in phase with overrides, or a profile run as a phase."""
    if not spec.profile:
        if spec.name not in BY_NAME:
            raise UsageError(f"[[phases]] {spec.name!r} names no built-in phase and gives no profile; built-in: "
                             f"{', '.join(BY_NAME)}")
        builtin = BY_NAME[spec.name]

        def overridden(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
            built = builtin.build(base, caps, ref)
            return built if isinstance(built, str) else dataclasses.replace(
                built, profile=with_overrides(built.profile, spec.overrides))
        return Phase(spec.name, builtin.traffic + (f" ({', '.join(spec.overrides)})" if spec.overrides else ""),
                     overridden)
    profile = load_profile(spec.profile, spec.overrides)  # a bad one is a usage error before anything starts

    def given(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
        return Traffic(profile, fit)
    return Phase(spec.name, f"the profile {profile.name}" + (f" ({', '.join(spec.overrides)})" if spec.overrides
                                                               else ""), given)


def chosen(profile: Profile, names: str | None, fit: bool) -> list[Phase]:
    """The battery's phases in its order: the profile's [[phases]] or the built-in ones, those `names` lists."""
    battery = [_own(spec, fit) for spec in profile.phases] if profile.phases else list(PHASES)
    if len({p.name for p in battery}) != len(battery):
        raise UsageError("[[phases]] names each phase once")
    if names is None:
        return battery
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {p.name for p in battery}
    if unknown := [n for n in wanted if n not in known]:
        raise UsageError(f"--phases: no phase named {', '.join(unknown)}; the battery's: {', '.join(known)}")
    if not wanted:
        raise UsageError("--phases: name at least one phase")
    return [p for p in battery if p.name in wanted]


def _builds(args: StressArguments) -> list[tuple[str, str]]:
    return list(zip(args.labels, args.engine_cmds, strict=True)) if len(args.engine_cmds) > 1 else []


async def stress(args: StressArguments, options: RunOptions, say: Say) -> Stressed:
    """The battery, or the matrix, as `args` ask; `options` are the first target's run options."""
    phases: Sequence[Phase] = chosen(options.profile, args.phases, options.fit)
    root = run_directory(dataclasses.replace(options, label="stress")) if options.out is None else options.out
    builds = _builds(args)
    if builds:
        matrix: Matrix = await run_matrix(options, builds, phases, root, say)
        lines = [f"{b.label}: " + (f"did not start: {b.target_error}" if b.target_error else
                                   f"first failure {b.first_failure or 'none'}") + f" ({b.wall_s:,.0f} s)"
                 for b in matrix.report.builds]
        return Stressed(root, any(b.failed for b in matrix.batteries), matrix.report.interrupted, matrix.errors,
                        matrix.written, lines)
    battery = await run_battery(options, phases, root, say)
    r = battery.report
    counts = {v: sum(p.verdict.value == v for p in r.phases) for v in ("pass", "fail", "skip")}
    line = (f"stress: {counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped in {r.wall_s:,.0f} s"
            + (f"; first failure: {r.first_failure}" if r.first_failure else ""))
    return Stressed(root, r.failed, r.interrupted, battery.errors, battery.written, [line])
