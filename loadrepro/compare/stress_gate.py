"""The regression gate of two stress batteries (stress.json), phase by phase, and of two release matrices
(matrix.json), build by build: RUN against BASELINE, as a nightly job runs it. A phase closes the gate only when it
passed in BASELINE and fails in RUN; the check names the rules that failed it. What else changed is said and never
closes it: a phase that failed in both (the rules that fail it only now are named), one that ran in BASELINE and
skips now (the battery lost that coverage), one that fails now but did not run in BASELINE (no verdict to hold it
to), one in only one of the two, a phase fixed. Phase verdicts are already each run's judgement, so nothing here
measures again or weighs noise: the tolerance does not apply. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from loadrepro.compare.gate import Gate, GateCheck
from loadrepro.schema.stress_report import MatrixBuild, MatrixReport, PhaseRow, PhaseVerdict, StressReport

PASS, FAIL, SKIP = PhaseVerdict.PASS, PhaseVerdict.FAIL, PhaseVerdict.SKIP
NO_NOISE = "none needed: each phase's verdict is its run's, judged by its rules; the tolerance does not apply"


def _said(verdict: PhaseVerdict | None, rules: Sequence[str], reasons: Sequence[str] = ()) -> str:
    """A phase's verdict in a cell: with the rules that failed it, or why it was skipped."""
    if verdict is None:
        return "not in it"
    if verdict is FAIL:
        return "fail" + (f" ({', '.join(rules)})" if rules else "")
    if verdict is SKIP and reasons:
        return f"skip ({reasons[0]})"
    return verdict.value


class Change(StrEnum):
    """What happened to one phase between BASELINE and RUN."""

    REGRESSED = "passed in BASELINE, fails in RUN"  # the one change that closes the gate
    FAILED_BOTH = "failed in both"
    LOST = "ran in BASELINE, skips in RUN: the battery lost this phase's coverage"
    GONE = "only in BASELINE: RUN did not run it (the battery lost its coverage)"
    NEW = "only in RUN: a phase BASELINE did not have"
    UNHELD = "fails in RUN, skipped in BASELINE: no verdict of BASELINE's to hold it to"
    FIXED = "failed in BASELINE, passes in RUN"
    SAME = "unchanged"


def _kind(before: PhaseVerdict | None, now: PhaseVerdict | None) -> Change:
    match before, now:
        case None, None:  # a phase of the matrix's that neither build reached (an interrupted matrix)
            return Change.SAME
        case PhaseVerdict.PASS, PhaseVerdict.FAIL:
            return Change.REGRESSED
        case PhaseVerdict.FAIL, PhaseVerdict.FAIL:
            return Change.FAILED_BOTH
        case None, _:
            return Change.NEW
        case _, None:
            return Change.GONE
        case PhaseVerdict.PASS | PhaseVerdict.FAIL, PhaseVerdict.SKIP:
            return Change.LOST
        case PhaseVerdict.SKIP, PhaseVerdict.FAIL:
            return Change.UNHELD
        case PhaseVerdict.FAIL, PhaseVerdict.PASS:
            return Change.FIXED
    return Change.SAME


def _words(kind: Change, before: PhaseRow | None, now: PhaseRow | None) -> str:
    """The change in words, with what the reader needs next: the failing run's directory, the rules new to it."""
    if kind is Change.REGRESSED and now is not None and now.run_dir:
        return f"{kind.value} (its run: {now.run_dir})"
    if kind is Change.FAILED_BOTH and before is not None and now is not None:
        new = [r for r in now.rules_fired if r not in before.rules_fired]
        return kind.value + (f"; in RUN also by {', '.join(new)}" if new else "")
    if kind is Change.NEW and now is not None and now.verdict is FAIL:
        return f"{kind.value}, and it fails"
    if kind is Change.SAME:
        return "in neither" if now is None else {PASS: "passed in both", SKIP: "skipped in both"}.get(
            now.verdict, kind.value)
    return kind.value


def _phase_check(name: str, before: PhaseRow | None, now: PhaseRow | None,
                 prefix: str = "") -> tuple[GateCheck, Change]:
    kind = _kind(before.verdict if before else None, now.verdict if now else None)
    check = GateCheck(figure=f"{prefix}phase {name}",
                      baseline=_said(before.verdict, before.rules_fired, before.reasons) if before else "not in it",
                      run=_said(now.verdict, now.rules_fired, now.reasons) if now else "not in it",
                      change=_words(kind, before, now), closed=kind is Change.REGRESSED)
    return check, kind


def _in_order(first: Sequence[str], second: Sequence[str]) -> list[str]:
    """RUN's phases in its order, then those only BASELINE had."""
    return [*second, *(n for n in first if n not in second)]


def _gate(checked: Sequence[tuple[GateCheck, Change]], tolerance: float, notes: Sequence[str]) -> Gate:
    """The gate over every phase's check: closed by any phase that regressed; what the battery lost and what fails
    in both said beside."""
    checks = [c for c, _ in checked]
    closed = [c for c in checks if c.closed]
    said = ["closed by " + "; ".join(f"{c.figure}: {c.baseline} -> {c.run}" for c in closed) if closed else
            "open: no phase that passed in BASELINE fails in RUN"]
    if lost := [c.figure for c, kind in checked if kind in (Change.LOST, Change.GONE)]:
        said.append(f"coverage lost: {', '.join(lost)} ran in BASELINE and did not run in RUN")
    if both := [c.figure for c, kind in checked if kind is Change.FAILED_BOTH]:
        said.append(f"failing in both, not gated: {', '.join(both)}")
    return Gate(passed=not closed, tolerance=tolerance, detail="; ".join([*said, *notes]), checks=checks,
                between_runs=NO_NOISE)


def _interrupted(report: StressReport, side: str) -> list[str]:
    return [f"{side} was interrupted: its phases after the interruption are skipped"] if report.interrupted else []


def stress_gate(baseline: StressReport, run: StressReport, tolerance: float = 0.0) -> Gate:
    """RUN's battery against BASELINE's, phase by phase (matched by name). `tolerance` is kept in the result, as
    the run gate's is, and applies to nothing."""
    before = {p.name: p for p in baseline.phases}
    now = {p.name: p for p in run.phases}
    checked = [_phase_check(name, before.get(name), now.get(name)) for name in _in_order(list(before), list(now))]
    return _gate(checked, tolerance, _interrupted(baseline, "BASELINE") + _interrupted(run, "RUN"))


def _matrix_row(build: MatrixBuild, phase: str) -> PhaseRow | None:
    """A build's phase as a row of its battery: the matrix keeps each phase's verdict and failing rules only."""
    verdict = build.verdicts.get(phase)
    if verdict is None:
        return None
    return PhaseRow(name=phase, verdict=verdict, reasons=[], rules_fired=build.rules.get(phase, []), traffic="",
                    run_dir=f"{build.stress_dir}/{phase}" if verdict is not SKIP else None)


def _build_checks(label: str, before: MatrixBuild | None, now: MatrixBuild | None,
                  phases: Sequence[str]) -> list[tuple[GateCheck, Change]]:
    if before is None or now is None:
        kind = Change.NEW if before is None else Change.GONE
        return [(GateCheck(figure=f"build {label}", baseline="in it" if before else "not in it",
                           run="in it" if now else "not in it",
                           change=("only in RUN" if before is None else "only in BASELINE") + ": not compared",
                           closed=False), kind)]
    return [_phase_check(phase, _matrix_row(before, phase), _matrix_row(now, phase), f"{label}: ")
            for phase in phases]


def matrix_gate(baseline: MatrixReport, run: MatrixReport, tolerance: float = 0.0) -> Gate:
    """RUN's release matrix against BASELINE's, build by build (matched by label), each build's phases as
    `stress_gate` compares them."""
    before = {b.label: b for b in baseline.builds}
    now = {b.label: b for b in run.builds}
    phases = _in_order(baseline.phases, run.phases)
    checked = [c for label in _in_order(list(before), list(now))
               for c in _build_checks(label, before.get(label), now.get(label), phases)]
    notes = [f"{side} was interrupted: its builds after the interruption are missing"
             for side, m in (("BASELINE", baseline), ("RUN", run)) if m.interrupted]
    return _gate(checked, tolerance, notes)
