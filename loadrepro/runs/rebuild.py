"""A run's reports rebuilt from its directory (`loadrepro report RUN_DIR`): the records and samples written as they
happened (requests.jsonl, samples.jsonl), the profile and the facts written before the load (profile.toml,
run.json). A run whose process was killed (SIGKILL, an OOM killer, a CI runner's hard stop) left no report, or only
its last checkpoint's; rebuilt, its report holds every record that reached the disk and says it is incomplete."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson

from loadrepro.config.profile import Profile
from loadrepro.config.profile_files import load_profile
from loadrepro.errors import UsageError
from loadrepro.records import NoteSource, RunResult, StopReason, Verification, read_run_files
from loadrepro.report.timeline import timeline_of
from loadrepro.report.write import write_reports
from loadrepro.runs.reporting import Reporter
from loadrepro.runs.run_facts import FACTS, RunFacts
from loadrepro.schema.run_report import RunReport
from loadrepro.workload.summary import summary_from_json


def rebuild(run_dir: Path, png: bool = False) -> tuple[RunReport, list[Path]]:
    """Judge what the run's files hold and write its reports again, report.html included (with its PNGs when
    `png`). A report.json
    that says the run ended is rebuilt as it was; one missing, or a checkpoint's, gives a report of a run that was
    killed (stop reason `killed`)."""
    missing = [name for name in (FACTS, "profile.toml", "requests.jsonl", "samples.jsonl")
               if not (run_dir / name).exists()]
    if missing:
        raise UsageError(f"{run_dir}: not a run directory loadrepro can rebuild (missing {', '.join(missing)})")
    facts = RunFacts.model_validate_json((run_dir / FACTS).read_text(encoding="utf-8"))
    profile = load_profile(str(run_dir / "profile.toml"))
    result = _result(run_dir, facts, profile, _ended_as(run_dir))
    on_disk = len(result.records)
    notes = [f"rebuilt from {run_dir.name}: {on_disk:,} records and the samples on disk"
             + ("; the run's process ended before its report (killed): the report is incomplete"
                if result.stop_reason is StopReason.KILLED else "")]
    summary = summary_from_json(facts.workload)
    reporter = Reporter(profile, summary, facts.command, notes, run_dir)
    report = reporter.final(result, Verification())
    written = write_reports(report, run_dir, timeline_of(result, trees=summary.trees), png=png)
    return report, written


def _ended_as(run_dir: Path) -> StopReason:
    """How the run's load ended, as its report.json says; KILLED when there is none, or a checkpoint's only."""
    path = run_dir / "report.json"
    if not path.exists():
        return StopReason.KILLED
    said = orjson.loads(path.read_bytes()).get("stop_reason", "")
    known = {reason.value for reason in StopReason} - {StopReason.RUNNING.value}
    return StopReason(said) if said in known else StopReason.KILLED


def _result(run_dir: Path, facts: RunFacts, profile: Profile, reason: StopReason) -> RunResult:
    files = read_run_files(run_dir)
    times = [r.end_ns for r in files.records] + [h.t_ns for h in files.health] + [m.t_ns for m in files.metrics]
    if files.start_ns is None or not times:
        raise UsageError(f"{run_dir}: its load never started (no record, or no start in samples.jsonl)")
    killed = reason is StopReason.KILLED
    result = RunResult(
        label=facts.label, base_url=facts.base_url, model=facts.model, engine_cmd=facts.engine_cmd,
        seed=profile.workload.seed, started_at=facts.started_at, start_ns=files.start_ns, end_ns=max(times),
        records=files.records, health=files.health,
        post_health=files.health[-1] if files.health and not killed else None,
        metrics=files.metrics, log_matches=files.matches, log_context=(),
        notes=tuple(n for n in files.notes if n.source != NoteSource.RUN), stop_reason=reason,
        interrupted=killed or reason is StopReason.INTERRUPTED, canaries=files.canaries, memory=files.memory,
        slo=profile.slo, watch=profile.watch)
    # Counted once, in [verdict]'s windows as the run counted them: every rule and report section reads this tally
    # (without one, each read counted every record again).
    return dataclasses.replace(result, tally=result.totals(profile.verdict.window_s))
