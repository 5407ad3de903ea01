"""`loadrepro stress`: the battery against one target. The target is probed once for what it takes; then each
phase, gentle first, is a run of its own in `root`/PHASE (its report, verdict and every rule as a run's), on an
engine loadrepro starts afresh for it (an engine command, or the simulated engine), so an engine a phase killed or
wedged meets the next phase restarted; a target at a URL that died makes the phases after it skip. stress.json,
stress.md, stress.html and junit.xml in `root`."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loadrepro.config.profile_files import with_overrides
from loadrepro.errors import InternalError, TargetError, TargetUnreachable, UsageError
from loadrepro.load.target import check_reachable
from loadrepro.load.transport import Transport
from loadrepro.records import Outcome, RequestRecord
from loadrepro.records.vocabulary import FaultNotCaused
from loadrepro.report.stress import write_stress
from loadrepro.runs.progress import Say
from loadrepro.runs.run_options import RunOptions
from loadrepro.runs.session import run_session
from loadrepro.schema.report_kinds import Severity
from loadrepro.schema.run_report import RunReport
from loadrepro.schema.stress_report import Capabilities, PhaseRow, PhaseVerdict, StressReport
from loadrepro.stress.capabilities import probed
from loadrepro.stress.phases import DEFAULT_RATE, RATE_PHASES, Phase, Reference, Traffic

# Rules that say the engine died or stopped serving while alive: the next phase must meet it restarted.
DOWN_RULES = frozenset({"engine_death", "wedged_while_healthy", "post_run_health", "no_recovery"})
# A phase whose plan an engine served before its faults on purpose were due is run again as a soak that goes on this
# long after its last fault: the fault then meets the traffic, and what follows it is watched for a while.
AFTER_FAULTS_S = 3.0


@dataclass(frozen=True, slots=True)
class Battery:
    report: StressReport
    root: Path
    written: list[Path]
    errors: int  # phases loadrepro itself failed to run (exit 3 when none failed)


@dataclass(slots=True)
class _State:
    """What the phases so far leave the next: the rate steady measured, where a target at a URL died."""

    reference: Reference
    died_in: str | None = None
    interrupted: bool = False
    errors: int = 0
    notes: list[str] = field(default_factory=list)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def _row(phase: Phase, ran: _Ran, managed: bool) -> PhaseRow:
    report, run_dir, wall_s = ran.report, ran.run_dir, ran.wall_s
    failing = [r for r in report.rules if r.fired and r.severity == Severity.FAIL]
    down = sorted({r.name for r in failing} & DOWN_RULES)
    engine = None
    if down:
        engine = (f"the engine went down ({', '.join(down)}): " + (
            "the next phase starts a fresh one" if managed else "the phases after meet it as it is"))
    verdict = PhaseVerdict.PASS if report.verdict == "pass" else PhaseVerdict.FAIL
    reasons = list(report.reasons) if failing else []
    if verdict is PhaseVerdict.PASS and (untested := _tested_nothing(report, ran.refusal)):
        verdict, reasons = PhaseVerdict.SKIP, [untested]
    return PhaseRow(name=phase.name, verdict=verdict, reasons=reasons,
                    rules_fired=[r.name for r in failing], traffic=phase.traffic, run_dir=str(run_dir),
                    requests=report.requests.total, outcomes=dict(report.requests.by_outcome),
                    ttft_p50_ms=report.latency.ttft_ms.p50, ttft_p95_ms=report.latency.ttft_ms.p95,
                    wall_s=round(wall_s, 2), engine=engine,
                    shrink=f"loadrepro shrink {run_dir}" if verdict is PhaseVerdict.FAIL else None)


def _tested_nothing(report: RunReport, refusal: str | None) -> str | None:
    """Why a run that passed tested nothing: the target refused every request it sent (a clean refusal at
    admission, which a run allows; `refusal` the first one's text), so the phase's traffic is one it does not
    take; None when it served any."""
    if not report.requests.total:
        return "no request was sent"
    if report.requests.by_outcome.get(Outcome.REJECTED.value, 0) < report.requests.total:
        return None
    said = f" ({refusal[:300]})" if refusal else ""
    return f"the target refused every one of its {report.requests.total} requests{said}: it does not take this " \
        "phase's traffic"


def _refusal(records: Sequence[RequestRecord]) -> str | None:
    return next((f"HTTP {r.status}: {r.detail}" for r in records if r.outcome is Outcome.REJECTED), None)


def _unproven(row: PhaseRow, not_caused: Sequence[FaultNotCaused]) -> PhaseRow:
    """A phase that passed with faults on purpose it never caused (the load ended before they were due) proved
    nothing of what it is for: a skip, saying so, not a pass."""
    if row.verdict is not PhaseVerdict.PASS or not not_caused:
        return row
    missed = "; ".join(f"{f.action.replace('_', ' ')} at {f.at_s:g} s: {f.why}" for f in not_caused)
    return row.model_copy(update={"verdict": PhaseVerdict.SKIP, "reasons": [
        f"its faults on purpose were never caused ({missed}): it proves nothing of what it is for"]})


def _skip(phase: Phase, reason: str) -> PhaseRow:
    return PhaseRow(name=phase.name, verdict=PhaseVerdict.SKIP, reasons=[reason], rules_fired=[],
                    traffic=phase.traffic, run_dir=None)


async def _alive(options: RunOptions) -> bool:
    """Whether a target at a URL still answers (an engine loadrepro starts is started afresh: always)."""
    if options.base_url is None:
        return True
    async with Transport(options.base_url, options.api_key, timeout_s=5.0) as http:
        try:
            await check_reachable(http, options.profile.watch.health_path)
        except TargetUnreachable:
            return False
    return True


@dataclass(frozen=True, slots=True)
class _Ran:
    report: RunReport
    run_dir: Path
    wall_s: float
    refusal: str | None  # the first refusal's status and text
    not_caused: tuple[FaultNotCaused, ...]  # faults on purpose the load ended before


async def _run_phase(options: RunOptions, phase: Phase, traffic: Traffic, root: Path) -> _Ran:
    began = time.monotonic()
    run = dataclasses.replace(options, profile=traffic.profile, out=root / phase.name, fit=traffic.fit,
                              size_to_overrun=None, label=phase.name, on_verdict=None, quiet=True, began_ns=None,
                              command=f"{options.command} --phases {phase.name}")
    session = await run_session(run, lambda _: None)
    if session.result.interrupted:
        raise KeyboardInterrupt
    return _Ran(session.report, session.run_dir, time.monotonic() - began, _refusal(session.result.records),
                session.result.not_caused)


def _past_faults(traffic: Traffic) -> Traffic | None:
    """The phase's traffic as a soak lasting AFTER_FAULTS_S past its last fault on purpose (None: it has none, or it
    is a soak already)."""
    load, events = traffic.profile.load, traffic.profile.chaos.events
    if not events or load.duration_s:
        return None
    lasting = max(e.at_s for e in events) + AFTER_FAULTS_S
    return dataclasses.replace(traffic, profile=with_overrides(traffic.profile, [f"load.duration_s={lasting:g}"]))


async def _faults_met(options: RunOptions, phase: Phase, traffic: Traffic, root: Path, state: _State, say: Say,
                      ran: _Ran) -> _Ran:
    """A phase whose run passed with faults on purpose never caused (the engine served its plan before they were
    due), run again as a soak past them, in place of that run; else the run as it was."""
    soak = _past_faults(traffic) if ran.not_caused and ran.report.verdict == "pass" else None
    if soak is None:
        return ran
    lasting = soak.profile.load.duration_s
    say(f"stress {phase.name}: its plan was served before its faults were due: run again for {lasting:g} s")
    state.notes.append(f"{phase.name}: the target served its plan before its faults on purpose were due, so it ran "
                       f"again repeating its plan for {lasting:g} s (its run is that one)")
    shutil.rmtree(ran.run_dir, ignore_errors=True)
    again = await _run_phase(options, phase, soak, root)
    return dataclasses.replace(again, wall_s=ran.wall_s + again.wall_s)


async def _phase(options: RunOptions, phase: Phase, caps: Capabilities, state: _State, root: Path,
                 say: Say) -> PhaseRow:
    """One phase's row: skipped (the target died before it, it cannot take the traffic), or run and judged."""
    if state.died_in is not None:
        return _skip(phase, f"the target died in phase {state.died_in}")
    built = phase.build(options.profile, caps, state.reference)
    if isinstance(built, str):
        return _skip(phase, built)
    try:
        ran = await _faults_met(options, phase, built, root, state, say, await _run_phase(options, phase, built, root))
    except TargetUnreachable as exc:
        state.died_in = state.died_in or "an earlier phase"
        return _skip(phase, f"the target did not answer: {exc}")
    except UsageError as exc:
        return _skip(phase, f"the target cannot take this phase's traffic: {exc}")
    except InternalError as exc:
        state.errors += 1
        return _skip(phase, f"loadrepro failed to run it: {exc}")
    row = _unproven(_row(phase, ran, options.base_url is None), ran.not_caused)
    if phase.name == "steady" and ran.report.throughput.requests_per_s > 0:
        state.reference = Reference(ran.report.throughput.requests_per_s, True)
    if row.verdict is PhaseVerdict.FAIL and not await _alive(options):
        state.died_in = phase.name
        row = row.model_copy(update={"engine": "the target stopped answering: the phases after are skipped"})
    return row


def _said(row: PhaseRow) -> str:
    if row.verdict is PhaseVerdict.SKIP:
        return f"stress {row.name}: skip ({row.reasons[0]})"
    rules = f"; {', '.join(row.rules_fired)}" if row.rules_fired else ""
    return (f"stress {row.name}: {row.verdict}{rules} ({row.requests} requests, TTFT p95 {_ms(row.ttft_p95_ms)}, "
            f"{row.wall_s:.1f} s)")


def _target(options: RunOptions) -> str:
    if options.base_url is not None:
        return options.base_url
    if options.engine_cmd is not None:
        return options.engine_cmd
    sim = options.profile.sim
    return f"the embedded simulated engine ({sim.scenario}, {sim.policy} policy)"


async def run_battery(options: RunOptions, phases: Sequence[Phase], root: Path, say: Say) -> Battery:
    """The battery's phases against `options`' target, each run in `root`/PHASE; its files written in `root`."""
    began = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    state = _State(Reference(DEFAULT_RATE, False))
    caps: Capabilities | None = None
    target_error: str | None = None
    try:
        caps = await probed(options, root / "probe", say)
    except (TargetError, TargetUnreachable) as exc:
        target_error = str(exc).splitlines()[0]
        say(f"stress: {target_error}")
        state.died_in = "its probe"
    except KeyboardInterrupt:
        state.interrupted = True
    if any(p.name in RATE_PHASES for p in phases) and not any(p.name == "steady" for p in phases):
        notes.append(f"no steady phase ran: the rate phases start from {DEFAULT_RATE:g} requests/s, not from what "
                     "the target served")
    rows: list[PhaseRow] = []
    for phase in phases:
        if state.interrupted:
            rows.append(_skip(phase, "interrupted"))
            continue
        if caps is None:
            rows.append(_skip(phase, f"the target could not be probed: {target_error}"))
            continue
        try:
            row = await _phase(options, phase, caps, state, root, say)
        except KeyboardInterrupt:
            state.interrupted = True
            row = _skip(phase, "interrupted while it ran")
        if phase.name in RATE_PHASES and row.verdict is not PhaseVerdict.SKIP and not state.reference.measured:
            notes.append(f"{phase.name}: sized from {DEFAULT_RATE:g} requests/s (steady measured none)")
        rows.append(row)
        say(_said(row))
    notes += state.notes
    if options.base_url is not None:
        notes.append(f"every phase ran against the same target at {options.base_url}: what one left in it the next "
                     "met (a fresh engine per phase needs --engine-cmd, or the simulated engine)")
    failed = next((r.name for r in rows if r.verdict is PhaseVerdict.FAIL), None)
    report = StressReport(label=options.label, target=_target(options), fresh_engine=options.base_url is None,
                          command=options.command, capabilities=caps, phases=rows, first_failure=failed,
                          wall_s=round(time.monotonic() - began, 2), interrupted=state.interrupted, notes=notes,
                          target_error=target_error)
    return Battery(report, root, write_stress(report, root), state.errors)
