"""`--trials N`: the same run N times, each on a fresh engine loadrepro starts (against a URL: the same target each
time, said so), one directory per trial (trial-01, ...), and a summary report beside them: the failure rate with
its exact 95% interval, which rules failed how often, when each failing trial first failed. `--vary-seed` gives
trial i the seed + i - 1 (and the simulated engine's race draw that seed).

An A/B with trials alternates stock and patched trials and stops as soon as the answer is decided
(compare/trials.py): a fix shown, out of reach, or the patched side failing; each side's directory holds its trials
and its summary, and the comparison says how sure it is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from loadrepro.compare.comparison import Comparison, compare, compare_trials
from loadrepro.compare.gate import Gate, gate, history_of
from loadrepro.compare.trials import Trial, decided, p_value, rate_of, signatures
from loadrepro.config.profile import Profile, VerdictSpec
from loadrepro.errors import UsageError
from loadrepro.load.planning import PlanMemo
from loadrepro.report.json import read_report
from loadrepro.report.write import write_comparison, write_reports
from loadrepro.runs.ab import Side, ab_side
from loadrepro.runs.progress import Say
from loadrepro.runs.run_options import RunOptions, run_directory
from loadrepro.runs.session import Session, run_session
from loadrepro.schema.long_run_sections import TrialRow, TrialsInfo
from loadrepro.schema.report_kinds import Severity, VerdictStatus
from loadrepro.schema.report_sections import RequestRow
from loadrepro.schema.run_report import RunReport

STOPS = {"shown": "the fix was shown", "patched failed": "the patched side failed, so no fix can be shown",
         "out of reach": "even if every remaining stock trial failed, p would not fall below alpha"}


@dataclass(frozen=True, slots=True)
class TrialsSession:
    run_dir: Path
    report: RunReport  # the summary: a representative trial's report with `trials` filled in
    sessions: list[Session]
    written: list[Path]
    interrupted: bool = False  # Ctrl-C or SIGTERM: the trials completed before it are summarised


@dataclass(frozen=True, slots=True)
class AbTrialsSession:
    run_dir: Path
    stock: RunReport
    patched: RunReport
    comparison: Comparison
    written: list[Path]
    stopped_early: str | None  # why fewer trials than asked for ran
    interrupted: bool = False  # Ctrl-C or SIGTERM: the trials completed before it are summarised and compared


def _trial_profile(profile: Profile, index: int, vary_seed: bool) -> Profile:
    if not vary_seed:
        return profile
    seed = profile.workload.seed + index - 1
    update: dict[str, object] = {"workload": profile.workload.model_copy(update={"seed": seed})}
    if profile.sim.race_probability and profile.sim.race_seed is None:  # the race's draw follows the seed too
        update["sim"] = profile.sim.model_copy(update={"race_seed": seed})
    return profile.model_copy(update=update)


async def _trial(options: RunOptions, root: Path, index: int) -> tuple[Session, Trial] | None:
    """The trial's run, or None when a signal stopped it (before its load, or during it: its report is kept on
    disk, but a trial cut short proves nothing)."""
    profile = _trial_profile(options.profile, index, options.vary_seed)
    run_dir = root / f"trial-{index:02d}"
    try:
        session = await run_session(dataclasses.replace(options, profile=profile, out=run_dir, pictures=False,
                                                        on_verdict=None, quiet=True, began_ns=None), lambda _: None)
    except KeyboardInterrupt:
        return None
    if session.result.interrupted:
        return None
    report = session.report
    failing = tuple(r.name for r in report.rules if r.fired and r.severity == Severity.FAIL)
    first = report.first_failure.t_s if report.first_failure else None
    return session, Trial(index, profile.workload.seed, report.passed, failing, first, str(run_dir))


def _info(trials: list[Trial], planned: int, vary_seed: bool) -> TrialsInfo:
    rate = rate_of(trials)
    return TrialsInfo(
        n=rate.n, planned=planned, failed=rate.failed, failure_rate=round(rate.rate, 4),
        ci95=[round(x, 4) for x in rate.ci95], signatures=signatures(trials),
        first_failure_s=[t.first_failure_s for t in trials if not t.passed and t.first_failure_s is not None],
        vary_seed=vary_seed,
        trials=[TrialRow(index=t.index, seed=t.seed,
                         verdict=VerdictStatus.PASS if t.passed else VerdictStatus.FAIL,
                         failing_rules=list(t.failing_rules), first_failure_s=t.first_failure_s, run_dir=t.run_dir)
                for t in trials])


def summarized(sessions: list[Session], trials: list[Trial], planned: int, options: RunOptions) -> RunReport:
    """The summary report: the first failing trial's report (else the last trial's), its verdict failing when any
    trial failed, the failure rate first among its reasons."""
    info = _info(trials, planned, options.vary_seed)
    shown = next((s for s, t in zip(sessions, trials, strict=True) if not t.passed), sessions[-1]).report
    rate = rate_of(trials)
    said = (f"failed {rate} trials" + (f"; rules: {', '.join(f'{k} {v}' for k, v in info.signatures.items())}"
                                       if info.signatures else "")
            + (f"; trial {next(t.index for t in trials if not t.passed)}'s reasons follow" if rate.failed else ""))
    notes = list(shown.notes)
    if options.base_url:
        notes.insert(0, f"trials: every trial ran against the same target at {options.base_url}, so what one left "
                        "in it the next met (a fresh engine per trial needs --engine-cmd or the simulated engine)")
    return shown.model_copy(update={
        "trials": info, "verdict": VerdictStatus.FAIL if rate.failed else VerdictStatus.PASS, "notes": notes,
        "reasons": [said, *shown.reasons] if rate.failed else [said], "label": options.label})


async def run_trials(options: RunOptions, say: Say = print) -> TrialsSession:
    options = dataclasses.replace(options, plans=options.plans or PlanMemo())
    root = run_directory(options)
    sessions, trials = [], []
    interrupted = False
    for i in range(1, options.trials + 1):
        trial_run = await _trial(options, root, i)
        if trial_run is None:
            interrupted = True
            break
        session, trial = trial_run
        sessions.append(session)
        trials.append(trial)
        say(f"trial {i}/{options.trials}: {'pass' if trial.passed else 'FAIL'}; {rate_of(trials).failed} failed so "
            "far")
    if not sessions:
        raise KeyboardInterrupt  # interrupted in the first trial: nothing to summarise
    report = summarized(sessions, trials, options.trials, options)
    if interrupted:
        report = report.model_copy(update={"notes": [*report.notes, f"trials: interrupted after {len(trials)} of "
                                                     f"{options.trials}; those completed before it are summarised"]})
    if options.on_verdict is not None:
        options.on_verdict(report)
    return TrialsSession(root, report, sessions, write_reports(report, root), interrupted)


async def run_ab_trials(options: RunOptions, stock: Side, patched: Side, say: Say = print) -> AbTrialsSession:
    """Stock and patched trials, alternately, until `options.trials` each or the answer is decided."""
    options = dataclasses.replace(options, plans=options.plans or PlanMemo())
    root = run_directory(dataclasses.replace(options, label="ab"))
    sides = {"stock": ab_side(options, "stock", stock, root / "stock"),
             "patched": ab_side(options, "patched", patched, root / "patched")}
    done: dict[str, tuple[list[Session], list[Trial]]] = {"stock": ([], []), "patched": ([], [])}
    why: str | None = None
    interrupted = False
    for i in range(1, options.trials + 1):
        for label, side in sides.items():
            trial_run = await _trial(side, root / label, i)
            if trial_run is None:  # left out with its pair
                interrupted = True
                break
            session, trial = trial_run
            done[label][0].append(session)
            done[label][1].append(trial)
        if interrupted:
            _pairs_only(done)
            break
        s, p = rate_of(done["stock"][1]), rate_of(done["patched"][1])
        say(f"trials {i}/{options.trials}: stock failed {s.failed}, patched failed {p.failed}; "
            f"p = {p_value(s, p):.3g}")
        why = decided(done["stock"][1], done["patched"][1], options.trials, options.alpha)
        if why is not None:
            break
    if not done["stock"][1]:
        raise KeyboardInterrupt  # interrupted in the first trials: nothing to summarise (each trial's report is kept)
    reports = {label: summarized(*done[label], options.trials, sides[label]) for label in sides}
    written = [path for label in sides for path in write_reports(reports[label], root / label)]
    every = tuple([session.report.request_table for session in done[label][0]] for label in sides)
    comparison = compare_trials(reports["stock"], reports["patched"], options.profile.verdict, options.alpha,
                                (every[0], every[1]))
    ran = len(done["stock"][1])
    early = f"after {ran} of {options.trials} trials a side: {STOPS[why]}" if why and ran < options.trials else None
    if interrupted:
        early = f"after {ran} of {options.trials} trials a side: interrupted"
    if early:
        comparison = comparison.model_copy(update={"detail": f"{comparison.detail} (stopped {early})"})
    return AbTrialsSession(root, reports["stock"], reports["patched"], comparison,
                           written + write_comparison(comparison, root), early, interrupted)


def _pairs_only(done: dict[str, tuple[list[Session], list[Trial]]]) -> None:
    """Each side's trials cut to the number both completed: trials are compared stock i against patched i."""
    pairs = min(len(trials) for _, trials in done.values())
    for sessions, trials in done.values():
        del sessions[pairs:], trials[pairs:]


def _every_trials_rows(report: RunReport, where: Path | None = None) -> list[list[RequestRow]]:
    """The request rows of every trial a summary report lists (each trial's own report.json), trial by trial.
    `where`: the summary's directory now. A run directory kept and moved (a nightly job's baseline, copied from
    tonight's) holds its trials beside its summary, while the paths it lists are where they were written, which may
    now be another run's."""
    assert report.trials is not None

    def rows(listed: Path) -> list[RequestRow]:
        found = [d for d in ((where / listed.name) if where else None, listed)
                 if d is not None and (d / "report.json").exists()]
        return read_report(found[0]).request_table if found else []

    # A trial without its report keeps its place: trials pair by index.
    return [rows(Path(t.run_dir)) for t in report.trials.trials]


def _same_workload(a: RunReport, b: RunReport) -> bool:
    return a.seed == b.seed and a.profile.get("workload") == b.profile.get("workload")


def history_runs(history: Path, like: RunReport,
                 leave_out: tuple[Path, ...] = ()) -> list[tuple[str, list[RequestRow]]]:
    """Each earlier run of `like`'s workload under `history` (every report.json below it, trials included, their
    summaries not), named by its directory under `history`, oldest first (by when each started: a change point is
    found in time order); `leave_out`: the run directories gated, which are not their own history. A report that
    does not read (a night killed while writing it) is no earlier run."""
    left = {d.resolve() for d in leave_out}
    found = []
    for path in sorted(history.rglob("report.json")):
        if any(p.resolve() in left for p in path.parents):
            continue
        try:
            report = read_report(path)
        except UsageError:
            continue
        if report.trials is None and _same_workload(report, like):
            found.append((report.started_at, path.parent.relative_to(history).as_posix(), report.request_table))
    return [(name, rows) for _, name, rows in sorted(found, key=lambda f: (f[0], f[1]))]


def gate_runs(baseline: RunReport, run: RunReport, tolerance: float, dirs: tuple[Path, Path] | None = None,
              history: Path | None = None) -> Gate:
    """`compare --gate`: RUN against BASELINE, two runs of one workload (or two sets of trials: every trial's
    requests). `dirs`: where each side's report is; `history`: a directory of earlier runs of the workload."""
    if not _same_workload(baseline, run):
        raise UsageError("a gate compares two runs of one workload, and these differ (seed "
                         f"{baseline.seed} vs {run.seed}, or their [workload]): give runs of the same profile")
    earlier = None
    if history is not None:
        named = history_runs(history, baseline, dirs[1:] if dirs else ())
        earlier = history_of([rows for _, rows in named], [name for name, _ in named])
    if baseline.trials is not None and run.trials is not None:
        where = dirs or (None, None)
        return gate(baseline, run, tolerance, (_every_trials_rows(baseline, where[0]),
                                               _every_trials_rows(run, where[1])), earlier)
    return gate(baseline, run, tolerance, history=earlier)


def compare_runs(stock: RunReport, patched: RunReport, spec: VerdictSpec, alpha: float = 0.05,
                 dirs: tuple[Path, Path] | None = None) -> Comparison:
    """`compare`: two runs, or two sets of trials (their summaries) with rates, p and every trial's latency.
    `dirs`: where each side's report is."""
    if stock.trials is not None and patched.trials is not None:
        where = dirs or (None, None)
        return compare_trials(stock, patched, spec, alpha, (_every_trials_rows(stock, where[0]),
                                                            _every_trials_rows(patched, where[1])))
    return compare(stock, patched, spec)
