"""One `loadrepro run`: pick the target, plan the workload on it, run, and keep everything in the run directory."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loadrepro.compare.comparison import Comparison, compare
from loadrepro.config.capacity import EngineLimits, Prediction, predict, prefix_for_overrun, smallest_pool_tokens
from loadrepro.config.defaults import API_KEY_ENV, ENGINE_START_TIMEOUT_S, run_stamp, sim_in_process
from loadrepro.config.profile import OUTAGES, LoadSpec, Profile, write_profile
from loadrepro.errors import InternalError, LoadreproError, TargetError, UsageError, keep_traceback
from loadrepro.judge.diagnose import diagnose, verification_for
from loadrepro.judge.judgement import judge
from loadrepro.judge.signatures import compile_catalog
from loadrepro.load.chaos import Oversize, oversize
from loadrepro.load.client import Client, ClientConfig
from loadrepro.load.engine import ManagedEngine
from loadrepro.load.gateway import find_gateway, health_path_for
from loadrepro.load.limits import discover, from_profile, longest_sequence
from loadrepro.load.live_metrics import LiveMetrics
from loadrepro.load.planning import PlanMemo, plan_on_target
from loadrepro.load.references import verify_answers
from loadrepro.load.runner import Runner, RunTarget, StartedReplica
from loadrepro.load.target import check_reachable, discover_model
from loadrepro.load.transport import Transport
from loadrepro.records import JsonlWriter, RunResult, replica_name
from loadrepro.report.build import build_report
from loadrepro.report.diagnosis import to_info
from loadrepro.report.timeline import for_report, timeline_of
from loadrepro.report.write import write_comparison, write_reports
from loadrepro.runs.checkpoints import Checkpoints
from loadrepro.runs.interrupts import INTERRUPTS
from loadrepro.runs.progress import Progress, Say
from loadrepro.schema.run_report import RunReport, Timing
from loadrepro.sim.process import as_typed, sim_engine_command
from loadrepro.workload.export import write_workload
from loadrepro.workload.model import Workload
from loadrepro.workload.plan import Plan
from loadrepro.workload.summary import summarize

REPORTS_ROOT = Path("reports")
OVERRUN_TURN_OVERHEAD = 40  # reply and template tokens a later turn adds beside its tool result
OVERRUN_MIN_PREFIX = 256


@dataclass(frozen=True, slots=True)
class RunOptions:
    profile: Profile
    base_url: str | None  # None: start the embedded simulated engine
    model: str | None
    label: str
    out: Path | None
    api_key_env: str = API_KEY_ENV
    quiet: bool = False
    command: str = "loadrepro run"  # how to reproduce this run, for the report
    engine_cmd: str | None = None  # start this engine ({port}, {host}) instead of the simulated one
    engine_start_timeout_s: float = ENGINE_START_TIMEOUT_S
    size_to_overrun: float | None = None  # choose conversations and prefix length: this x the binding KV pool
    tokenizer: Path | None = None  # count in this local Hugging Face tokenizer's tokens instead of asking the target
    pictures: bool = True  # timeline/latency plots and report.html (a shrink's trials go without: they are many)
    workers: int = 1  # processes sending the load (load/backend/processes.py)
    ray: str | None = None  # "local" or a Ray cluster's address: workers are Ray actors (load/backend/ray_actors.py)
    on_verdict: Callable[[RunReport], None] | None = None  # told the verdict before the pictures are drawn
    trials: int = 1  # > 1: run N times, each on a fresh engine (runs/repeats.py)
    vary_seed: bool = False  # trials: trial i gets the seed + i - 1
    alpha: float = 0.05  # A/B trials: a fix is shown when the one-sided Fisher test's p is below this
    serve_metrics: int | None = None  # serve loadrepro's own metrics on 127.0.0.1:PORT while it runs (0: any port)
    replicas: int = 1  # start the engine this many times, each a replica (the first the target)
    plans: PlanMemo | None = None  # the runs of one command (trials, sweep levels) plan a workload once per engine
    # When the command began (perf_counter_ns), for report.json's timing: the command line's process start (so the
    # cost of its imports is in it); None: when this run's session began (an API call, a trial, a shrink's run, an
    # A/B's patched side): a process that runs many must not count the ones before.
    began_ns: int | None = None

    @property
    def api_key(self) -> str | None:
        """The target's key, from the environment variable `api_key_env` names (never written anywhere)."""
        return os.environ.get(self.api_key_env) or None


@dataclass(frozen=True, slots=True)
class Session:
    run_dir: Path
    plan: Plan
    result: RunResult
    report: RunReport
    written: list[Path]


def _extra(profile: Profile) -> list[tuple[str, str, str, bool]]:
    return [(s.name, s.pattern, s.class_, s.throttling) for s in profile.signatures]


def run_directory(options: RunOptions) -> Path:
    if options.out is not None:
        path = options.out
    else:
        stamp = run_stamp()
        path = REPORTS_ROOT / f"{stamp}-{options.profile.name}-{options.label}"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True, slots=True)
class _Started:
    """An engine loadrepro started, as the run follows it: where it serves, its log, its exit."""

    url: str
    log: Path
    exit_code: Callable[[], int | None]  # None while it runs


@dataclass(frozen=True, slots=True)
class _Target:
    url: str
    counter_is_local: bool  # the simulated engine's tokenizer runs in process
    engine: ManagedEngine | None = None  # the target's process, when loadrepro started one: for faults on purpose
    started: tuple[_Started, ...] = ()  # the engines loadrepro started, the target first, then --replicas N's
    command: str | None = None  # how the engine loadrepro started was started, as the report shows it


def _log_of(run_dir: Path, replica: int) -> Path:
    return run_dir / (f"engine-{replica_name(replica)}.log" if replica else "engine.log")


def _role(replica: int) -> str:
    return "target" if not replica else replica_name(replica)


@contextlib.asynccontextmanager
async def _target(options: RunOptions, run_dir: Path, say: Say) -> AsyncIterator[_Target]:
    """The URL to load: given, or an engine loadrepro starts (the user's command, else the simulated engine)."""
    if options.base_url is not None:
        if stopping := sorted({e.action for e in options.profile.chaos.events} & OUTAGES):
            raise UsageError(f"[[chaos.events]] {', '.join(stopping)} stop and start the engine, which needs an "
                             f"engine loadrepro starts (--engine-cmd, or the simulated engine), not a URL "
                             f"({options.base_url})")
        yield _Target(options.base_url, False)
        return
    if options.engine_cmd is None and sim_in_process() and not any(
            e.action in OUTAGES for e in options.profile.chaos.events):
        async with _sims_in_threads(options, run_dir, say) as target:
            yield target
        return
    command = options.engine_cmd or sim_engine_command(options.profile.sim)
    engines = [ManagedEngine(command, _log_of(run_dir, i), health_path=options.profile.watch.health_path or "/health",
                             api_key=options.api_key)
               for i in range(options.replicas)]
    try:
        urls = []
        for i, engine in enumerate(engines):  # one at a time: each takes the machine's cores while it loads
            urls.append(await engine.astart(options.engine_start_timeout_s))
            what = "engine" if options.engine_cmd else (
                f"embedded simulated engine ({options.profile.sim.scenario}, {options.profile.sim.policy} policy)")
            say(f"{_role(i)}: the {what} at {urls[-1]} (pid {engine.pid}); its log is {engine.log}")
        first = engines[0]
        yield _Target(urls[0], options.engine_cmd is None, first,
                      tuple(_Started(e.url, e.log, e.exit_code) for e in engines),
                      first.command if options.engine_cmd else as_typed(first.command))
    finally:
        await _stop_all(engines, say)


@contextlib.asynccontextmanager
async def _sims_in_threads(options: RunOptions, run_dir: Path, say: Say) -> AsyncIterator[_Target]:
    """The embedded simulated engine (and its --replicas) served on threads of this process (SIM_IN_PROCESS_ENV)."""
    from loadrepro.sim.config import resolve as resolve_sim  # the server's stack, imported only by who serves here
    from loadrepro.sim.serve import SimThread

    spec = options.profile.sim
    sims = [SimThread(resolve_sim(spec), _log_of(run_dir, i)) for i in range(options.replicas)]
    try:
        for i, sim in enumerate(sims):
            await asyncio.to_thread(sim.start)
            say(f"{_role(i)}: the embedded simulated engine ({spec.scenario}, {spec.policy} policy) at {sim.url} "
                f"(on a thread of this process); its log is {sim.log_path}")
        host, port = sims[0].url.removeprefix("http://").rsplit(":", 1)
        yield _Target(sims[0].url, True, None, tuple(_Started(s.url, _log_of(run_dir, i), s.exit_code)
                                                      for i, s in enumerate(sims)),
                      as_typed(sim_engine_command(spec)).replace("{host}", host).replace("{port}", port))
    finally:
        await asyncio.gather(*(asyncio.to_thread(sim.stop) for sim in sims))
        for i in range(len(sims)):
            say(f"{'engine' if not i else replica_name(i)}: stopped (its thread ended)")


async def _stop_all(engines: list[ManagedEngine], say: Say) -> None:
    try:
        # up to their grace period, side by side: the loop goes on meanwhile
        await asyncio.gather(*(asyncio.to_thread(engine.stop) for engine in engines))
    except BaseException:
        for engine in engines:
            engine.stop()  # interrupted again while stopping: finish the stop here, then go on unwinding
        raise
    finally:
        for i, engine in enumerate(engines):
            role = "engine" if not i else replica_name(i)
            say(f"{role}: {engine.ended.how if engine.ended else 'stopping'}")


def _oversize(profile: Profile, limits: EngineLimits | None, longest: tuple[int, str] | None) -> Oversize | None:
    """The prompt of a [[chaos.events]] oversize request: beyond the target's KV limits, or without them its
    longest sequence; UsageError (the profile cannot run on this target) when it publishes neither."""
    if not any(e.action == "oversize" for e in profile.chaos.events):
        return None
    if limits is not None:
        return oversize(limits.max_seq_len, smallest_pool_tokens(limits), limits.source)
    if longest is None:
        raise UsageError("[[chaos.events]] oversize sends a request just beyond what the engine can hold, and the "
                         "target publishes no limit (no max_model_len in /v1/models, no n_ctx in /props, no KV "
                         "pool in /metrics): set [engine] max_seq_len to its longest sequence")
    return oversize(longest[0], None, longest[1])


def _predictions(plan: Plan, profile: Profile, limits: EngineLimits | None) -> tuple[Prediction, ...]:
    if limits is None:
        return ()
    predictions = []
    for r in plan.workload.requests:
        tokens = r.expected_prompt_tokens + r.max_tokens
        predictions.append(Prediction(r.conversation, r.turn, *predict(tokens, profile.load.concurrency, limits),
                                      tokens))
    return tuple(predictions)


def _overrun(profile: Profile, limits: EngineLimits | None, factor: float, say: Say) -> Profile:
    """The profile with conversations and prefix length chosen so the run needs `factor` x the binding pool."""
    w = profile.workload
    if limits is None:
        raise TargetError("--size-to-overrun needs the target's KV limits: it publishes none, so add an [engine] "
                          "section to the profile")
    if w.kind != "conversations":
        raise UsageError("--size-to-overrun sizes conversation workloads, not trace replays")
    later = (w.turns - 1) * (w.turn_tokens + OVERRUN_TURN_OVERHEAD)
    conversations = w.conversations
    prefix = prefix_for_overrun(factor, conversations, later, w.max_tokens, limits)
    while prefix + later + w.max_tokens > limits.max_seq_len:  # too long for one request: more conversations
        conversations += 1
        prefix = prefix_for_overrun(factor, conversations, later, w.max_tokens, limits)
    while prefix < OVERRUN_MIN_PREFIX and conversations > 1:
        conversations -= 1
        prefix = prefix_for_overrun(factor, conversations, later, w.max_tokens, limits)
    if prefix < OVERRUN_MIN_PREFIX:
        raise UsageError(f"--size-to-overrun {factor}: the pool is too small for a {OVERRUN_MIN_PREFIX}-token prefix")
    say(f"size-to-overrun {factor}: {conversations} conversations x {prefix:,}-token prefixes "
        f"(+{later:,} later-turn tokens, up to {w.max_tokens:,} output) = {factor} x the binding pool of "
        f"{smallest_pool_tokens(limits):,} tokens ({limits.source})")
    workload = w.model_copy(update={"conversations": conversations, "prefix_tokens": prefix, "groups": 0,
                                    "prefix_tokens_p95": 0})
    return profile.model_copy(update={"workload": workload})


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
    async with _target(options, run_dir, say) as target:
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
            model = options.model or profile.model or await discover_model(http)
            limits = from_profile(profile.engine) or await discover(http)
            context = await longest_sequence(http, profile.engine)
            if options.size_to_overrun:
                profile = _overrun(profile, limits, options.size_to_overrun, say)
            beyond = _oversize(profile, limits, context)
            write_profile(profile, run_dir / "profile.toml")
            plan, notes = await plan_on_target(profile, None if target.counter_is_local else http, model,
                                               options.tokenizer, say, options.plans, options.engine_cmd)
            notes += [gateway_note] if gateway_note is not None else []
        write_workload(plan.workload, run_dir / "workload.jsonl.gz")
        config = ClientConfig(
            base_url=target.url, api=profile.api, model=model, concurrency=profile.load.concurrency,
            request_timeout_s=profile.load.request_timeout_s, stall_timeout_s=profile.load.stall_timeout_s,
            ttft_timeout_s=profile.load.ttft_timeout_s,
            api_key=api_key, max_retries=profile.load.max_retries,
            signatures=compile_catalog(_extra(profile)),
            compare_tokens=profile.verify.compare_tokens if profile.verify.outputs != "off" else 0,
            replicas=(*profile.target.replicas, *(e.url for e in target.started[1:])), routing=profile.target.routing)
        first = target.started[0] if target.started else None
        run_target = RunTarget(target.url, model, options.label, engine_cmd=target.command,
                               engine_exit=first.exit_code if first else None,
                               engine_log=first.log if first else None, engine=target.engine,
                               oversize=beyond,
                               health_owner=gateway.owns(profile.watch.health_path) if gateway else None,
                               started_replicas=tuple(
                                   StartedReplica(i, e.log, e.exit_code)
                                   for i, e in enumerate(target.started[1:], len(profile.target.replicas) + 1)))
        async with Client(config) as client:
            runner = Runner(profile, plan.workload, client, run_target, run_dir, workers=options.workers,
                            ray=options.ray, live_metrics=live)

            def interrupt() -> None:
                stopped.set()
                runner.interrupt()

            routed.enter_context(INTERRUPTS.routed_to(interrupt))
            judged = _Judged(profile, plan, limits, options.command, notes, run_dir, live, context)
            checkpoints = Checkpoints(_checkpoint_s(profile.load), runner.snapshot, judged.checkpoint)
            with Progress(options.quiet) as progress, _frozen_heap():
                checkpoints.start()
                try:
                    result = await runner.run(progress)
                finally:
                    await checkpoints.stop()
            if profile.verify.outputs != "off":
                result = await _verified(result, client, target.url, api_key, plan.workload, profile, notes, say,
                                         run_dir, stopped)
    if checkpoints.written:
        notes.append(f"checkpoints: {checkpoints.written} written while the run went on "
                     f"({checkpoints.seconds:.1f} s on a worker thread in all)")
    if checkpoints.failed:
        notes.append(f"checkpoints: stopped after {checkpoints.written}: {checkpoints.failed}")
    if live is not None:
        live.phased("judging")
    result, report = judged.final(result)
    report = report.model_copy(update={"timing": _timing(result, options.began_ns)})
    if options.on_verdict is not None:
        options.on_verdict(report)
    pictures = timeline_of(result) if options.pictures else None
    written = write_reports(report, run_dir, pictures)
    if result.worker_crash is not None:
        raise InternalError(f"{result.worker_crash}; the report of everything received is in {run_dir}")
    return Session(run_dir, plan, result, report, written)


async def _verified(result: RunResult, client: Client, url: str, api_key: str | None, workload: Workload,
                    profile: Profile, notes: list[str], say: Say, run_dir: Path, stop: asyncio.Event) -> RunResult:
    """The run with its answers checked ([verify]), when its load ended as planned and the engine is there to ask;
    Ctrl-C (`stop`) stops the checking, keeping what was checked. What each request answered alone is kept in
    references.jsonl, beside requests.jsonl's answers under load."""
    if not result.stop_reason.as_planned:
        notes.append(f"answers: not checked, since the run ended {result.stop_reason.replace('_', ' ')}")
        return result
    records = result.sampled_answers or result.records
    if result.tally is not None and result.tally.dropped:
        notes.append(f"answers: chosen among a uniform sample of {len(records):,} of the run's completed requests "
                     f"(of {result.tally.requests:,} requests; beyond [load] keep_records, records are not kept in "
                     "memory)")
    say(f"checking answers: {profile.verify.outputs} of the completed requests, each sent again alone")
    async with Transport(url, api_key) as http:
        verified = await verify_answers(client, http, workload, records, profile.verify, stop)
    written = JsonlWriter(run_dir / "references.jsonl")
    for reference in verified.references:
        written.write(reference)
    written.close()
    notes.append(verified.note)
    say(verified.note)
    return dataclasses.replace(result, answers=verified.checks, verify=profile.verify)


def process_start_ns() -> int | None:
    """When this process started, on the clock records use (CLOCK_MONOTONIC), from /proc where there is one."""
    try:
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_s = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time, since boot
        since_boot = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.perf_counter_ns()
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return int(started_s * 1e9) - since_boot


def _timing(result: RunResult, started: int | None) -> Timing:
    sent = [r.sent_ns for r in result.records if r.sent_ns is not None]
    first = min(sent) if sent else None
    last = max((r.end_ns for r in result.records), default=None)
    return Timing(to_first_request_s=round((first - started) / 1e9, 3) if first and started else None,
                  last_answer_to_verdict_s=round((time.perf_counter_ns() - last) / 1e9, 3) if last else None)


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """What exists before the load (the workload, its pool, the imports) is left out of the garbage collector's
    full passes while the load runs: each pass over it paused the event loop, and so every stream's clock, for up
    to ~40 ms at 2,000 requests (at most ~5 ms when frozen). Unfrozen after, so nothing stays out of reach."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _checkpoint_s(load: LoadSpec) -> float:
    """The profile's interval; unset, 60 s for a soak (a run with a duration) and none otherwise."""
    if load.checkpoint_s is not None:
        return load.checkpoint_s
    return 60.0 if load.duration_s else 0.0


@dataclass(frozen=True, slots=True)
class _Judged:
    """Judging and reporting a run's result, for the final report and for the checkpoints alike."""

    profile: Profile
    plan: Plan
    limits: EngineLimits | None
    command: str
    notes: list[str]
    run_dir: Path
    live: LiveMetrics | None = None  # told the rules fired at each judgement
    context: tuple[int, str] | None = None  # the longest sequence a request may have, and where it was read

    def _report(self, result: RunResult, final: bool) -> tuple[RunResult, RunReport]:
        result = dataclasses.replace(result, limits=self.limits, context=self.context,
                                     predictions=_predictions(self.plan, self.profile, self.limits))
        judgement = judge(result, self.profile.verdict, final)
        if self.live is not None:
            self.live.rules((name, f.severity.value if f else None) for name, f in judgement.findings)
        log = self.run_dir / "engine.log"
        catalog = compile_catalog(_extra(self.profile))
        diagnosis = to_info(diagnose([log], catalog, verification_for(self.run_dir, result.engine_cmd))) \
            if final and log.exists() else None
        report = build_report(result, self.profile, judgement, summarize(self.plan), self.command,
                              extra_notes=self.notes, diagnosis=diagnosis)
        return result, report

    def final(self, result: RunResult) -> tuple[RunResult, RunReport]:
        return self._report(result, final=True)

    def checkpoint(self, result: RunResult) -> None:
        write_reports(self._report(result, final=False)[1], self.run_dir)


@dataclass(frozen=True, slots=True)
class AbSession:
    stock: Session
    patched: Session
    comparison: Comparison
    written: list[Path]


# An A/B side: (its URLs, the first the engine and the others its replicas; engine command), at most one given.
Side = tuple[tuple[str, ...], str | None]


def ab_side(options: RunOptions, label: str, side: Side, out: Path) -> RunOptions:
    """One side of an A/B: its URLs or engine command, or the simulated engine with that side's policy."""
    urls, command = side
    target = options.profile.target.model_copy(update={"replicas": urls[1:]})
    profile = options.profile.model_copy(update={
        "sim": options.profile.sim.model_copy(update={"policy": label}), "target": target})
    return dataclasses.replace(options, profile=profile, base_url=urls[0] if urls else None, label=label, out=out,
                               engine_cmd=command, began_ns=options.began_ns if label == "stock" else None)


async def run_ab(options: RunOptions, stock: Side, patched: Side, say: Say = print) -> AbSession:
    """The same seeded workload against stock then patched, each side a (URL, engine command) with at most one
    given; with neither, the simulated engine's two policies. Each managed engine is started fresh."""
    root = run_directory(dataclasses.replace(options, label="ab"))
    sessions: list[Session] = []
    for label, side in (("stock", stock), ("patched", patched)):
        say(f"--- {label} ---")
        sessions.append(await run_session(ab_side(options, label, side, root / label), say))
        if sessions[-1].result.interrupted:
            raise KeyboardInterrupt  # its report is written; the other side is not started
    before, after = sessions
    comparison = compare(before.report, after.report, options.profile.verdict)
    timelines = [for_report(timeline_of(s.result), s.report) for s in (before, after)]
    return AbSession(before, after, comparison, write_comparison(comparison, root, timelines))
