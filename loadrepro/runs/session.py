"""One `loadrepro run`, its stages in order: the target prepared (runs/target.py), the workload planned on it,
the load driven while the engine is watched (load/runner.py), the answers checked (runs/verify.py), then judged
and reported (runs/reporting.py), everything kept in the run directory."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from loadrepro.config.profile_files import write_profile
from loadrepro.errors import InternalError, LoadreproError, UsageError, keep_traceback
from loadrepro.judge.signatures import profile_catalog
from loadrepro.load.arrivals import request_slots
from loadrepro.load.cache_reset import reset_all
from loadrepro.load.client import Client, ClientConfig
from loadrepro.load.gateway import find_gateway, health_path_for
from loadrepro.load.limits import discover, from_profile, longest_sequence
from loadrepro.load.live_metrics import LiveMetrics
from loadrepro.load.planning import plan_on_target
from loadrepro.load.run_target import RunTarget, StartedReplica
from loadrepro.load.runner import Runner
from loadrepro.load.target import check_reachable, discover_model
from loadrepro.load.transport import Transport
from loadrepro.load.warmup import WarmupKind, warm_up
from loadrepro.load.watch.introspection import introspection_for
from loadrepro.records import RunResult, Verification
from loadrepro.runs.checkpoints import Checkpoints, interval_s
from loadrepro.runs.heap import frozen_heap
from loadrepro.runs.interrupts import INTERRUPTS
from loadrepro.runs.progress import Progress, Say
from loadrepro.runs.run_facts import RunFacts, summary_json, write_facts
from loadrepro.runs.run_options import RunOptions, run_directory
from loadrepro.runs.sizing import fitted, overrun, oversize_for, predictions, unfit_warning
from loadrepro.runs.target import started_target
from loadrepro.workload.cache_bust import busted
from loadrepro.workload.export import PLAIN_WORKLOAD_FILE, WORKLOAD_FILE, compress_workload, write_workload
from loadrepro.workload.model import PlannedRequest, Workload
from loadrepro.workload.plan import Plan
from loadrepro.workload.summary import WorkloadSummary, summarize
from loadrepro.workload.warmups import engine_warmups

if TYPE_CHECKING:
    from loadrepro.config.profile import Profile
    from loadrepro.runs.reporting import Reporter
    from loadrepro.schema.run_report import RunReport


@dataclass(frozen=True, slots=True)
class Session:
    run_dir: Path
    plan: Plan
    result: RunResult
    report: RunReport
    written: list[Path]
    answers: Verification = Verification()  # [verify]'s, checked after the load


async def run_session(options: RunOptions, say: Say = print) -> Session:
    """One run; a failure of loadrepro's own (not the target's, not bad input) is an InternalError whose
    traceback is kept in the run directory. A signal before its load (an engine starting, planning) raises
    KeyboardInterrupt here, in the caller, once the engines it started are stopped."""
    INTERRUPTS.check()  # a signal whose KeyboardInterrupt was lost: no new run starts after it
    return await INTERRUPTS.stoppable(_session(options, say))


async def _session(options: RunOptions, say: Say) -> Session:
    if options.began_ns is None:
        options = dataclasses.replace(options, began_ns=time.perf_counter_ns())
    run_dir = run_directory(options)
    live = _live_metrics(options.serve_metrics, say)
    try:
        return await _run_in(run_dir, options, say, live)
    except LoadreproError:
        raise
    except Exception as exc:
        trace = keep_traceback(exc, run_dir / "traceback.txt")
        raise InternalError(f"internal error ({type(exc).__name__}: {exc}); the traceback is in {trace}") from exc
    finally:
        if live is not None:
            await asyncio.to_thread(live.close)  # it may wait for one more scrape


def _live_metrics(port: int | None, say: Say) -> LiveMetrics | None:
    """loadrepro's own metrics served while the run goes on (--serve-metrics); a port taken is a usage error."""
    if port is None:
        return None
    try:
        live = LiveMetrics(port, "target")
    except OSError as exc:
        raise UsageError(f"--serve-metrics {port}: cannot listen on 127.0.0.1:{port} ({exc})") from None
    say(f"metrics: loadrepro's own at {live.url} while it runs")
    return live


async def _run_in(run_dir: Path, options: RunOptions, say: Say, live: LiveMetrics | None) -> Session:
    # From the runner's start until the reports are written, a signal stops what goes on (the load, the answers'
    # check) and the report of what ran is still written; before it, a signal cancels the start (interrupts.py).
    routed = contextlib.ExitStack()
    with routed:
        return await _routed_run(run_dir, options, say, live, routed)


async def _routed_run(run_dir: Path, options: RunOptions, say: Say, live: LiveMetrics | None,
                      routed: contextlib.ExitStack) -> Session:
    profile = options.profile
    api_key = options.api_key
    stopped = asyncio.Event()
    async with started_target(options, run_dir, say) as target:
        if live is not None:
            live.endpoint = target.url
            live.phased("planning")
        async with Transport(target.url, api_key) as http:
            gateway = await find_gateway(http)
            health_path, gateway_note = health_path_for(gateway, profile.watch.health_path)
            if gateway_note is not None:
                say(gateway_note)
                profile = profile.model_copy(
                    update={"watch": profile.watch.model_copy(update={"health_path": health_path})})
            await check_reachable(http, profile.watch.health_path)
            profile = await introspection_for(http, profile)
            model = options.model or profile.model or await discover_model(http)
            limits = from_profile(profile.engine) or await discover(http)
            context = await longest_sequence(http, profile.engine)
            if options.size_to_overrun:
                profile = overrun(profile, limits, options.size_to_overrun, say)
            fit_note = None
            if options.fit:
                profile, fit_note = fitted(profile, limits, context, options.engine_cmd)
                say(fit_note)
            beyond = oversize_for(profile, limits, context)
            write_profile(profile, run_dir / "profile.toml")
            plan, notes = await plan_on_target(profile, None if target.counter_is_local else http, model,
                                               options.tokenizer, say, options.plans, options.engine_cmd)
            notes += [gateway_note] if gateway_note is not None else []
            predicted = predictions(plan, profile, limits)
            unfit = unfit_warning(plan, predicted, context)
            if unfit is not None:
                say(unfit)
            notes += [n for n in (fit_note, unfit) if n is not None]
            replicas = (*profile.target.replicas, *(e.url for e in target.started[1:]))
            if profile.target.reset_cache:  # after the counting, which may have warmed it, and before the load
                notes.append(await reset_all(http, replicas, api_key))
        # The engine's warm-ups are made before the file is written, which holds them: a reproducer sends them first
        warming = engine_warmups(plan.workload, profile.load.warmup_requests, f"{run_dir.resolve()}:{time.time_ns()}")
        notes += _workload_written(plan.workload, run_dir / PLAIN_WORKLOAD_FILE, warming)
        config = ClientConfig(
            base_url=target.url, api=profile.api, model=model, concurrency=request_slots(profile.load, plan.workload),
            request_timeout_s=profile.load.request_timeout_s, stall_timeout_s=profile.load.stall_timeout_s,
            ttft_timeout_s=profile.load.ttft_timeout_s,
            api_key=api_key, max_retries=profile.load.max_retries,
            signatures=profile_catalog(profile),
            compare_tokens=profile.verify.compare_tokens if profile.verify.outputs != "off" else 0,
            replicas=replicas, routing=profile.target.routing, fresh_connections=profile.load.fresh_connections)
        first = target.started[0] if target.started else None
        run_target = RunTarget(target.url, model, options.label, engine_cmd=target.command,
                               engine_exit=first.exit_code if first else None,
                               engine_log=first.log if first else None, engine=target.engine,
                               oversize=beyond,
                               health_owner=gateway.owns(profile.watch.health_path) if gateway else None,
                               started_replicas=tuple(
                                   StartedReplica(i, e.log, e.exit_code)
                                   for i, e in enumerate(target.started[1:], len(profile.target.replicas) + 1)),
                               limits=limits, context=context, predictions=predicted)
        async with Client(config) as client:
            workload = plan.workload if profile.workload.cache_bust == "none" else \
                busted(plan.workload, f"{run_dir.resolve()}:{time.time_ns()}")
            # Before the load, in the start (a signal stops them as it stops the planning): the engine's warm-ups,
            # then a mid-trajectory start's, which find the engine warm.
            sent_first: tuple[tuple[WarmupKind, tuple[PlannedRequest, ...]], ...] = (
                ("engine", warming), ("trajectory", workload.warmups))
            answered = 0
            for kind, warmups in sent_first:
                if warmups:
                    warmed = await warm_up(client, warmups, profile.load.concurrency, stopped, run_dir, kind)
                    say(warmed.note())
                    notes.append(warmed.note())
                    answered += warmed.outcomes.get("ok", 0)
            if target.engine is not None and not answered:  # a fresh engine, which stalls may be the cold start of
                run_target = dataclasses.replace(run_target, fresh_engine_ns=target.engine.ready_ns)
            runner = Runner(profile, workload, client, run_target, run_dir, workers=options.workers,
                            ray=options.ray, live_metrics=live)

            def interrupt() -> None:
                stopped.set()
                runner.interrupt()

            routed.enter_context(INTERRUPTS.routed_to(interrupt))
            summary = summarize(plan)
            write_facts(run_dir, RunFacts(
                label=options.label, base_url=target.url, model=model, engine_cmd=target.command,
                engine_cmd_template=target.template,
                command=options.command, started_at=datetime.now(UTC).isoformat(timespec="seconds"),
                workload=summary_json(summary), limits=run_target.limits, context=run_target.context,
                health_owner=run_target.health_owner, replicas=list(replicas),
                fresh_engine_ns=run_target.fresh_engine_ns))
            interval = interval_s(profile.load)
            judged = _reporter(profile, summary, options.command, notes, run_dir, live) if interval else None
            checkpoints = Checkpoints(interval, runner.snapshot, judged.checkpoint if judged else _no_checkpoint)
            with Progress(options.quiet) as progress, frozen_heap():
                checkpoints.start()
                try:
                    result = await runner.run(progress)
                finally:
                    await checkpoints.stop()
            answers = Verification()
            if profile.verify.outputs != "off":
                from loadrepro.runs.verify import verified  # after the load, as the reports' modules (_reporter)

                answers = await verified(result, client, target.url, api_key, workload, profile, notes, say,
                                         run_dir, stopped)
    if checkpoints.written:
        notes.append(f"checkpoints: {checkpoints.written} written while the run went on "
                     f"({checkpoints.seconds:.1f} s on a worker thread in all)")
    if checkpoints.failed:
        notes.append(f"checkpoints: stopped after {checkpoints.written}: {checkpoints.failed}")
    if live is not None:
        live.phased("judging")
    # The reports' modules, once the load is over (_reporter says why)
    from loadrepro.report.timeline import timeline_of
    from loadrepro.report.write import write_reports
    from loadrepro.runs.reporting import timing

    judged = judged or _reporter(profile, summary, options.command, notes, run_dir, live)
    report = judged.final(result, answers)
    report = report.model_copy(update={"timing": timing(result, options.began_ns)})
    if options.on_verdict is not None:
        options.on_verdict(report)
    pictures = timeline_of(result, answers, summary.trees) if options.pictures else None
    written = write_reports(report, run_dir, pictures, options.png)
    await asyncio.to_thread(_compressed, run_dir / PLAIN_WORKLOAD_FILE)  # zstd leaves the GIL: other runs go on
    if result.worker_crash is not None:
        raise InternalError(f"{result.worker_crash}; the report of everything received is in {run_dir}")
    return Session(run_dir, plan, result, report, written, answers)


def _reporter(profile: Profile, summary: WorkloadSummary, command: str, notes: list[str], run_dir: Path,
              live: LiveMetrics | None) -> Reporter:
    """The run's judge and reporter. Its modules (the rules, the report's models and writers) are a tenth of a
    second of imports: a run makes it after its load, so that its first request does not wait on them, and a run
    with checkpoints before it, so that no checkpoint's thread imports them while requests stream."""
    from loadrepro.runs.reporting import Reporter

    return Reporter(profile, summary, command, notes, run_dir, live)


def _no_checkpoint(_: RunResult) -> None:
    """What a run without checkpoints writes at one: nothing (its Checkpoints never call it)."""


def _workload_written(workload: Workload, path: Path, engine_warmups: tuple[PlannedRequest, ...]) -> list[str]:
    """workload.jsonl, before the load (compressed once the reports are out: _compressed), with the engine's warm-ups;
    a failure to write it is a note, and the run goes on."""
    try:
        write_workload(workload, path, engine_warmups)
    except OSError as exc:
        return [f"{WORKLOAD_FILE}: not written ({exc}); a bundle of this run holds no request bodies"]
    return []


def _compressed(plain: Path) -> None:
    """workload.jsonl as workload.jsonl.zst; left as it is when that fails (a bundle reads either)."""
    if plain.exists():
        with contextlib.suppress(OSError):
            compress_workload(plain)


