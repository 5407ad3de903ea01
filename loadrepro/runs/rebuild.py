"""A run's reports rebuilt from its directory (`loadrepro report RUN_DIR`): the records and samples written as they
happened (requests.jsonl; samples.jsonl, with the watched endpoints' and replicas' samples, the faults on purpose,
the replicas' exits and how the run ended), the profile and the facts written before the load (profile.toml;
run.json, with the target's limits; the workload file, whose planned lengths give the capacity model's
predictions), and the engine's log (the lines before its first fatal line). A run whose process was killed
(SIGKILL, an OOM killer, a CI runner's hard stop) left no report, or only its last checkpoint's; rebuilt, its report
holds every record that reached the disk and says it is incomplete."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import orjson

from loadrepro.config.capacity import Prediction
from loadrepro.config.profile import Profile, WatchedEndpoint
from loadrepro.config.profile_files import load_profile
from loadrepro.errors import UsageError
from loadrepro.judge.signatures import SignatureClass
from loadrepro.load.recorder import Recorder
from loadrepro.load.watch.endpoint_polls import replicas_watched
from loadrepro.load.watch.introspection import INTROSPECTION
from loadrepro.load.watch.logs import CONTEXT_LINES
from loadrepro.records import (
    NoteSource,
    RunEnd,
    RunFiles,
    RunResult,
    Sample,
    StopReason,
    Verification,
    Watched,
    read_checks,
    read_run_files,
)
from loadrepro.report.timeline import timeline_of
from loadrepro.report.write import write_reports
from loadrepro.runs.reporting import Reporter
from loadrepro.runs.run_facts import FACTS, RunFacts
from loadrepro.runs.sizing import predicted
from loadrepro.runs.target import log_of
from loadrepro.schema.run_report import RunReport
from loadrepro.workload.export import open_workload, workload_file
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
    on_disk = result.totals(profile.verdict.window_s).requests
    notes = [f"rebuilt from {run_dir.name}: {on_disk:,} records and the samples on disk"
             + ("; the run's process ended before its report (killed): the report is incomplete"
                if result.stop_reason is StopReason.KILLED else "")]
    summary = summary_from_json(facts.workload)
    reporter = Reporter(profile, summary, facts.command, notes, run_dir)
    report = reporter.final(result, Verification(read_checks(run_dir), profile.verify))
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
    # How the run ended, as it wrote it; a run killed first ends at the last thing on disk, with the engine's last
    # progress the last token any record got.
    ended = files.ended or RunEnd(max(times), files.health[-1] if files.health and not killed else None,
                                  max((r.chunk_ns[-1] if r.chunk_ns else r.first_token_ns or 0
                                       for r in files.records), default=0), None, None, None)
    predictions = predicted(_planned(run_dir), profile.load.concurrency, facts.limits)
    kept = _kept(files, files.start_ns, profile, predictions)
    return RunResult(
        label=facts.label, base_url=facts.base_url, model=facts.model, engine_cmd=facts.engine_cmd,
        seed=profile.workload.seed, started_at=facts.started_at, start_ns=files.start_ns, end_ns=ended.end_ns,
        records=tuple(kept.records), health=tuple(kept.health), post_health=ended.post_health,
        metrics=tuple(kept.metrics), log_matches=tuple(kept.matches), log_context=_log_context(run_dir, files),
        notes=tuple(n for n in kept.notes if n.source != NoteSource.RUN), stop_reason=reason,
        interrupted=killed or reason is StopReason.INTERRUPTED, canaries=tuple(kept.canaries),
        memory=tuple(kept.memory), slo=profile.slo, watch=profile.watch,
        faults=tuple(sorted(files.faults, key=lambda f: f.at_ns)),
        not_caused=tuple(sorted(files.not_caused, key=lambda f: f.at_s)),
        introspection=tuple(kept.watched.get(INTROSPECTION, ([], []))[0]), health_owner=facts.health_owner,
        limits=facts.limits, context=facts.context, fresh_engine_ns=facts.fresh_engine_ns,
        predictions=predictions,
        watched=tuple(_watched(kept, e) for e in profile.watch.endpoints),
        replicas=_replicas(kept, files, facts, profile),
        progress_ns=ended.progress_ns, stopped_ns=ended.stopped_ns, engine_running=ended.engine_running,
        worker_crash=ended.worker_crash, sampled_answers=kept.sampled_answers(), tally=kept.tally)


def _kept(files: RunFiles, start_ns: int, profile: Profile, predictions: tuple[Prediction, ...]) -> Recorder:
    """The run's files replayed through what the run kept in memory (load/recorder.py): its records, its samples
    thinned alike past MAX_SAMPLES of a kind (a soak's hours of polls), and its tally, counted once over every record
    and sample as the run counted them: the rules and sections read what they read in the run."""
    # the readings the run made of scrapes are on disk
    kept = Recorder.of_run(profile, None, rss_from_metrics=False, predictions=predictions)
    kept.started(start_ns)
    samples: tuple[Sample, ...] = (*files.health, *files.metrics, *files.matches, *files.notes, *files.canaries,
                                   *files.memory)
    for sample in samples:
        kept.sample(sample)
    for endpoint in files.endpoints:
        kept.endpoint_sample(endpoint)
    for record in files.records:
        kept.record(record)
    return kept


def _log_context(run_dir: Path, files: RunFiles) -> tuple[str, ...]:
    """The lines before the first fatal line of the first log that had one (the target's before the replicas'), as
    the run quoted them: from the engine's log in the run directory, which loadrepro followed from its start; none
    when that log's line there is not the one matched (the run followed another log, from its end)."""
    fatal = sorted((m for m in files.matches if m.klass == SignatureClass.FATAL.value),
                   key=lambda m: (m.replica, m.line_number))
    if not fatal or not (path := log_of(run_dir, fatal[0].replica)).exists():
        return ()
    with path.open(encoding="utf-8", errors="replace", newline="\n") as log:
        lines = [line.rstrip("\r\n") for _, line in zip(range(fatal[0].line_number), log, strict=False)]
    if len(lines) < fatal[0].line_number or lines[-1][:1000] != fatal[0].line:
        return ()
    return tuple(lines[:-1][-CONTEXT_LINES:])


def _watched(kept: Recorder, endpoint: WatchedEndpoint) -> Watched:
    health, metrics = kept.watched.get(endpoint.name, ([], []))
    return Watched(endpoint.name, endpoint.health_url, endpoint.metrics_url, tuple(health), tuple(metrics))


def _replicas(kept: Recorder, files: RunFiles, facts: RunFacts, profile: Profile) -> tuple[Watched, ...]:
    exits = {e.index: e.exit for e in files.replica_exits}
    return tuple(dataclasses.replace(_watched(kept, endpoint), url=url, exit=exits.get(i))
                 for i, (endpoint, url) in enumerate(zip(replicas_watched(tuple(facts.replicas), profile.watch),
                                                         facts.replicas, strict=True), 1))


def _planned(run_dir: Path) -> Iterator[tuple[int, int, int]]:
    """Each planned request's (conversation, turn, prompt + max_tokens), from the workload file (none from a run
    that wrote no max_tokens there)."""
    if (path := workload_file(run_dir)) is None:
        return
    with open_workload(path) as lines:
        for line in lines:
            planned = orjson.loads(line)
            if planned.get("type") == "request" and "max_tokens" in planned:
                tokens = planned["expected_prompt_tokens"] + planned["max_tokens"]
                yield planned["conversation"], planned["turn"], tokens
