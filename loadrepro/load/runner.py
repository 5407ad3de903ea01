"""Runs a workload's arrivals (load/arrivals.py) against a target, watches the target meanwhile, and returns a
RunResult. Owns every task.

Faults on purpose ([[chaos.events]], load/chaos.py) run beside the load at their times. While one stops the engine
(kill, restart, pause) and until /health answers 200 again, a request that fails is the fault's (outcome
`faulted`), and neither its failures nor the engine's exit or silence are judged as the engine dying.

Stops: the workload is done, the duration is reached, the engine died (with `stop_on_death`: no new requests, a
short grace for those in flight, then they are cancelled), or an interrupt (in-flight requests are cancelled at
once). Every record is written the moment it completes.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadrepro.config.profile import Profile, WatchedEndpoint
from loadrepro.judge.death import Death
from loadrepro.judge.live import LiveJudge
from loadrepro.load.backend import backend_for
from loadrepro.load.backend.base import LoadBackend, LoadSetup, WorkerCrashed
from loadrepro.load.chaos import ChaosTools
from loadrepro.load.client import Client
from loadrepro.load.engine import describe_exit
from loadrepro.load.faults import FaultsOnPurpose
from loadrepro.load.live import LiveState
from loadrepro.load.live_metrics import LiveMetrics
from loadrepro.load.pause import pause, unless
from loadrepro.load.recorder import Recorder
from loadrepro.load.run_target import RunTarget
from loadrepro.load.transport import Transport
from loadrepro.load.watch.canary import Canaries
from loadrepro.load.watch.endpoint_polls import replicas_watched, watch_endpoint
from loadrepro.load.watch.health_polls import HealthWatcher
from loadrepro.load.watch.logs import LogWatcher
from loadrepro.load.watch.metrics_scrapes import MetricsWatcher
from loadrepro.records import (
    FAILED,
    KV_USAGE,
    RUNNING,
    WAITING,
    CanarySample,
    EndpointSample,
    HealthSample,
    MetricsSample,
    Note,
    NoteSource,
    Outcome,
    ProcessExit,
    RequestRecord,
    RunResult,
    Sample,
    StopReason,
    Watched,
)
from loadrepro.records.redact import scrub
from loadrepro.workload.model import PlannedRequest, Workload

GRACE_S = 10.0  # how long requests in flight may finish once the run stops starting new ones
SETTLE_S, SETTLE_POLL_S = 5.0, 0.5  # after the load, how long the engine may take to show nothing running
ENGINE_POLL_S = 0.1


# How many requests wait or run says nothing of progress: a deadlocked engine keeps those steady, or not.
_NOT_PROGRESS = (RUNNING, WAITING)


def _moved(before: dict[str, float], after: dict[str, float]) -> bool:
    """Whether the engine's metrics show work between two scrapes (KV usage, cache counters, preemptions...)."""
    return any(before.get(k) != v for k, v in after.items() if k not in _NOT_PROGRESS)


class Runner:
    def __init__(self, profile: Profile, workload: Workload, client: Client, target: RunTarget, out_dir: Path,
                 clock: Callable[[], int] = time.perf_counter_ns, workers: int = 1, ray: str | None = None,
                 live_metrics: LiveMetrics | None = None) -> None:
        """`workers` > 1: the load is sent from that many processes (load/backend/processes.py); with `ray`
        ("local" or a cluster's address), from that many Ray actors (load/backend/ray_actors.py).
        `live_metrics`: told every record and sample as it comes (--serve-metrics)."""
        self.profile, self.workload, self.client, self.target = profile, workload, client, target
        self._clock = clock
        self._load = profile.load
        watch, limit = profile.watch, profile.verdict.max_health_latency_s
        fast_s = min(watch.health_timeout_s, watch.liveness_timeout_s, *([limit] if limit > 0 else []))
        verify = profile.verify
        answers = 0 if verify.outputs == "off" else verify.sample if verify.outputs == "sample" else \
            profile.load.keep_records
        self._recorder = Recorder(out_dir, profile.verdict.window_s, profile.load.keep_records, fast_s, answers,
                                  profile.slo)
        self._health: HealthWatcher | None = None
        self._stopped = asyncio.Event()  # set once no new request may start
        self._interrupted = asyncio.Event()  # set by Ctrl-C or SIGTERM: every wait after the load ends
        self._stop_reason: StopReason | None = None
        self._stopped_ns: int | None = None
        self._load_task: asyncio.Task[None] | None = None
        self._crash: str | None = None  # how a load worker failed
        self._replicas = replicas_watched(client.config.replicas, profile.watch)
        self._target_dead = False
        self._judge = LiveJudge(frozenset(s.name for s in client.config.signatures if s.upstream))
        self._started_at = ""
        self._logs: LogWatcher | None = None
        self._replica_logs = [LogWatcher(r.log, self._on_sample, True, client.config.signatures, clock, r.index)
                              for r in target.started_replicas]
        self._replica_exits: dict[int, ProcessExit] = {}
        self._chaos = FaultsOnPurpose(list(profile.chaos.events), clock, self._stopped, self._note)
        self.live = LiveState(clock(), None if self._load.duration_s else len(workload.requests),
                              self._load.duration_s or None)
        self._live_metrics = live_metrics
        if live_metrics is not None:
            live_metrics.in_flight_from(lambda: self.live.in_flight)
        setup = LoadSetup(self._load, workload, profile.workload.seed, client, self.live, self._stopped,
                          self._on_record)
        self._backend: LoadBackend = backend_for(setup, workers, ray, clock)
        self.workers, self.backend = self._backend.workers, self._backend.name

    # -- records and samples ----------------------------------------------------------------------------------

    def _on_record(self, record: RequestRecord) -> None:
        if record.outcome in FAILED and self._chaos.spans.overlaps(record.sent_or_queued_ns, record.end_ns):
            record = dataclasses.replace(record, outcome=Outcome.FAULTED,
                                         detail=f"{record.outcome} during a fault on purpose: {record.detail}")
        record = self._chaos.after_wipe(record)
        self._recorder.record(record)
        if self._live_metrics is not None:
            self._live_metrics.record(record)
        self.live.outcomes[record.outcome] += 1
        if record.replica:  # another replica's: its death is judged by its /health (rule replica_death)
            return
        self._judged(self._judge.request_ended(record.outcome, record.signature, record.end_ns,
                                               self.client.activity.last_ns))
        if self._judge.failed(record.outcome) and self._health is not None:
            self._health.poke()

    def _on_sample(self, sample: Sample) -> None:
        if isinstance(sample, MetricsSample):  # what the engine's running count is judged against: its own requests
            sample = dataclasses.replace(sample, in_flight=self.live.at_target)
        previous = self._recorder.metrics[-1] if self._recorder.metrics else None  # the last is never merged
        self._recorder.sample(sample)
        if self._live_metrics is not None:
            self._live_metrics.sample(sample)
        match sample:
            case HealthSample():
                self.live.health = sample.status
                if not self._chaos.spans.overlaps(sample.t_ns - sample.latency_ns, sample.t_ns):
                    self._judge_health(sample)
            case CanarySample():  # a request to the engine like any other, for judging its death
                if sample.ok or not self._chaos.spans.overlaps(sample.t_ns, sample.end_ns):
                    self._judged(self._judge.request_ended(Outcome(sample.outcome), sample.signature,
                                                           sample.end_ns, sample.progress_ns))
            case MetricsSample(values=values):
                if previous is not None and _moved(previous.values, values):
                    # A scrape is stamped when it was sent; one a busy engine answered late must not move the
                    # engine's last progress back past the tokens that came meanwhile (that read a streaming engine,
                    # its /health starved, as dead).
                    self.client.activity.last_ns = max(self.client.activity.last_ns, sample.t_ns)
                self.live.kv_usage = values.get(KV_USAGE, self.live.kv_usage)

    def _note(self, source: NoteSource, text: str) -> None:
        self._on_sample(Note(self._clock(), source, scrub(text)))

    def _judge_health(self, sample: HealthSample) -> None:
        runs = self.target.engine_exit is not None and self.target.engine_exit() is None
        self._judged(self._judge.health_polled(sample.t_ns, sample.status, self.client.activity.last_ns, runs))

    def _judged(self, death: Death | None) -> None:
        """A death the judge saw: noted at the time it began (the engine_death rule reports it), and the load
        stopped unless the engine already exited (noted then)."""
        if death is None or self._stop_reason is not None:
            return
        self._on_sample(Note(death.t_ns, NoteSource.DEATH, scrub(death.words)))
        self._engine_died()

    def _engine_exited(self) -> bool:
        """Note a managed engine's exit (once) as engine death; True once it has exited."""
        code = self.target.engine_exit() if self.target.engine_exit else None
        if code is None:
            return False
        if not any(n.source == NoteSource.ENGINE for n in self._recorder.notes):
            self._note(NoteSource.ENGINE, f"the engine process {describe_exit(code)}")
            self._engine_died()
        return True

    async def _settle_engine(self) -> None:
        """An exit that cut the last requests counts, however quick: the kernel closes a dying process's sockets
        a moment before its exit can be collected, so wait that moment when requests were failing."""
        if self.target.engine_exit is None:
            return
        last = self._recorder.last
        failing = last is not None and last.outcome in (Outcome.TRUNCATED, Outcome.UNREACHABLE)
        for _ in range(10 if failing else 1):
            if self._engine_exited():
                return
            if failing:
                await asyncio.sleep(ENGINE_POLL_S)

    async def _watch_engine(self, stop: asyncio.Event) -> None:
        """A managed engine that exits is engine death at that instant, not connection errors found later."""
        while not stop.is_set():
            if self._engine_exited():
                return
            await pause(stop, ENGINE_POLL_S)

    def _chaos_tools(self, health: HealthWatcher | None) -> ChaosTools:
        async def healthy() -> bool:
            return (await health.poll()).healthy if health else True

        async def send(planned: PlannedRequest) -> RequestRecord:
            config = dataclasses.replace(self.client.config.alone(), concurrency=1, max_retries=0)
            async with Client(config, self._clock) as own:  # its own connection, outside the load's limit
                return await own.send(-1, planned, self._clock(), time.time(), lambda r: None)

        def gone() -> bool:  # a fault's waits for the engine end: it exited or died, or the run was interrupted
            return self._target_dead or self._stop_reason is StopReason.INTERRUPTED or self._engine_exited()

        return ChaosTools(self.target.engine, self._backend.abort, send, healthy if health else None,
                          self.client.config.api, self.target.oversize, self._clock, self.target.base_url,
                          self.client.config.api_key, self.target.model, gone)

    async def _settle_metrics(self, metrics: MetricsWatcher) -> None:
        """Scrapes after the load until the engine reports nothing running or waiting, for up to SETTLE_S: what
        is still running then, with nothing of loadrepro's in flight, the engine never freed (zombie_requests).
        After an interrupt, one scrape, cut short if the engine does not answer it at once: the user is waiting for
        the exit, and an interrupted run proves nothing;
        with the engine dead or its /health not 200, one too: a dead engine's metrics are frozen, and zombies are
        not judged on an engine that left service."""
        down = self._stop_reason is StopReason.ENGINE_DEATH or self._judge.dead or self.live.health not in (200, None)
        settle_s = 0.0 if self._stop_reason is StopReason.INTERRUPTED or down else SETTLE_S
        deadline = self._clock() + int(settle_s * 1e9)
        while True:
            await unless(self._interrupted, metrics.scrape())
            last = self._recorder.metrics[-1].values if self._recorder.metrics else {}
            if not last.get(RUNNING) and not last.get(WAITING) or self._clock() >= deadline or \
                    self._interrupted.is_set():
                return
            await asyncio.sleep(SETTLE_POLL_S)

    async def _watch_saturation(self, stop: asyncio.Event) -> None:
        """At the end of each window: once the run so far is saturated (judge/windows.py), the load ends there.
        A request is counted when it ends, so the requests in flight and those waiting in loadrepro to be sent at
        each window's end are taken live."""
        window_s = self.profile.verdict.window_s
        backlog: list[tuple[int, int]] = []
        while not await pause(stop, window_s):
            backlog.append((self.live.in_flight, self.live.queued))
            if self._judge.saturated(self.snapshot(), window_s, backlog):
                self._note(NoteSource.SATURATION,
                           "the load stopped: it saturated the engine ([load] stop_when_saturated)")
                self._stop(StopReason.SATURATED, GRACE_S)
                return

    def _engine_died(self) -> None:
        self._target_dead = True
        if self._replicas_serve() and self._load_task is not None and not self._load_task.done():
            return  # the other replicas still serve: the load goes on (rule replica_death says what they did)
        if self._load.stop_on_death or self._load_task is None or self._load_task.done():
            self._stop(StopReason.ENGINE_DEATH, GRACE_S)

    def _stop(self, reason: StopReason, grace_s: float) -> None:
        """Start no more requests; cancel those in flight after `grace_s`."""
        if self._stop_reason is not None and reason is not StopReason.INTERRUPTED:
            return
        self._stop_reason = reason
        self._stopped_ns = self._stopped_ns or self._clock()
        self.live.stopping = reason
        self._stopped.set()
        if self._load_task is not None:
            asyncio.get_running_loop().call_later(grace_s, self._load_task.cancel)

    async def _post_health(self, health: HealthWatcher) -> HealthSample | None:
        """The run's last word on /health: a poll, and one that got no answer asked once more a poll interval later
        (one hung poll of a busy engine is not its death), unless the engine's process exited meanwhile. None when
        an interrupted run got no answer at once: an interrupted run is not judged by it."""
        post = await unless(self._interrupted, health.poll())
        if post is None or post.status != "unreachable" or self._engine_exited():
            return post
        if await pause(self._interrupted, self.profile.watch.health_interval_s):
            return post
        return await unless(self._interrupted, health.poll()) or post

    def interrupt(self) -> None:
        """Ctrl-C or SIGTERM (routed here by the signals' owner): cancel everything in flight now, the faults going
        on included (whatever they wait for); the run still ends with a result."""
        self._stop(StopReason.INTERRUPTED, 0.0)
        self._interrupted.set()
        self._chaos.interrupt()

    # -- the run ----------------------------------------------------------------------------------------------

    async def run(self, progress: Callable[[LiveState], Awaitable[None]] | None = None) -> RunResult:
        self._started_at = datetime.now(UTC).isoformat(timespec="seconds")
        watch = self.profile.watch
        stop_watching = asyncio.Event()
        loop = asyncio.get_running_loop()
        try:
            async with Transport(self.target.base_url, self.client.config.api_key, timeout_s=5.0) as http:
                health = self._health = HealthWatcher(
                    http, watch.health_path, watch.health_interval_s, self._on_sample, self._clock,
                    watch.health_timeout_s) if watch.health_path else None
                await self._check_health_before(health)
                logs = self._logs = self._log_watcher()
                # Counted before the load starts, so that no line the load causes is taken as old; a log that
                # cannot be read is said once, and not followed.
                if logs and not await self._watch(NoteSource.ENGINE_LOG, logs.start()):
                    logs = None
                await self._backend.prepare()  # workers start before time zero, not in the load's first second
                if self._live_metrics is not None:
                    self._live_metrics.phased("loading")
                self.live.started_ns = self._chaos.started_ns = self._clock()
                self._recorder.started(self.live.started_ns)
                # marks time zero in samples.jsonl
                self._on_sample(Note(self.live.started_ns, NoteSource.RUN, "the load started"))
                async with asyncio.TaskGroup() as tg:
                    metrics = MetricsWatcher(http, watch.metrics_path, watch.metrics_interval_s, self._on_sample,
                                             self._clock) if watch.metrics_path else None
                    if metrics and self.profile.chaos.events:  # the quiet moment each fault's KV is held to
                        await self._watch(NoteSource.METRICS, metrics.scrape())
                    for source, watcher in self._watchers(health, metrics, logs, stop_watching):
                        tg.create_task(self._watch(source, watcher))
                    if self.target.engine_exit:
                        tg.create_task(self._watch_engine(stop_watching))
                    if progress:
                        tg.create_task(self._report_progress(progress, stop_watching))
                    self._load_task = tg.create_task(self._send_load())
                    deadline = (loop.call_later(self._load.duration_s, self._stop, StopReason.DURATION, GRACE_S)
                                if self._load.duration_s else None)
                    self._chaos.schedule(self._chaos_tools(health))
                    try:
                        await self._load_task
                    except asyncio.CancelledError:
                        if self._stop_reason is None:
                            raise
                    finally:
                        if deadline is not None:
                            deadline.cancel()
                        self._chaos.load_ended()
                    await self._chaos.done(self._stop_reason is StopReason.INTERRUPTED)
                    await self._settle_engine()
                    stop_watching.set()
                for text in self._backend.notes():
                    self._note(NoteSource.WORKERS, text)
                if metrics:  # the state the load left behind, even when it was quicker than a scrape
                    await self._watch(NoteSource.METRICS, self._settle_metrics(metrics))
                if logs and not logs.found:
                    self._note(NoteSource.ENGINE_LOG,
                               f"{logs.path} never appeared, so no error signature was read from it")
                end_ns = self._clock()
                post = await self._post_health(health) if health else None
                if resent := http.reconnects:
                    self._note(NoteSource.CONTROL, f"{resent} health/metrics requests resent on a new connection: the "
                                          "target had closed the pooled one (not unhealthy polls)")
        finally:
            self._recorder.close()
        return self._result(end_ns, post, self._stop_reason or StopReason.DONE)

    def _watchers(self, health: HealthWatcher | None, metrics: MetricsWatcher | None, logs: LogWatcher | None,
                  stop: asyncio.Event) -> list[tuple[NoteSource, Coroutine[Any, Any, Any]]]:
        """The watchers [watch] asks for beside the load, each named by what it says when it fails."""
        watch = self.profile.watch
        table: list[tuple[NoteSource, Coroutine[Any, Any, Any]]] = []
        if health:
            table.append((NoteSource.HEALTH, health.run(stop)))
        if metrics:
            table.append((NoteSource.METRICS, metrics.run(stop)))
        if logs:
            table.append((NoteSource.ENGINE_LOG, logs.run(stop)))
        if watch.canary_interval_s > 0:
            canaries = Canaries(self.client.config.alone(), watch.canary_interval_s, self.client.activity,
                                self._on_sample, self._clock)
            table.append((NoteSource.CANARY, canaries.run(stop)))
        if self._load.stop_when_saturated:
            table.append((NoteSource.SATURATION, self._watch_saturation(stop)))
        table += [(NoteSource.HEALTH, watch_endpoint(endpoint, watch, self._on_endpoint_sample, self._clock, stop))
                  for endpoint in (*watch.endpoints, *self._replicas)]
        table += [(NoteSource.ENGINE_LOG, replica_log.run(stop)) for replica_log in self._replica_logs]
        if self.target.started_replicas:
            table.append((NoteSource.ENGINE, self._watch_replica_exits(stop)))
        return table

    def _replicas_exited(self) -> None:
        """Note when each replica loadrepro started exits by itself (once); the load ends when the last serving
        one went and the target is dead."""
        for replica in self.target.started_replicas:
            if replica.index not in self._replica_exits and (code := replica.exit_code()) is not None:
                self._replica_exits[replica.index] = ProcessExit(self._clock(), code, describe_exit(code))
                if self._target_dead and not self._replicas_serve():
                    self._stop(StopReason.ENGINE_DEATH, GRACE_S)

    async def _watch_replica_exits(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and len(self._replica_exits) < len(self.target.started_replicas):
            self._replicas_exited()
            await pause(stop, ENGINE_POLL_S)

    def _on_endpoint_sample(self, sample: EndpointSample) -> None:
        self._recorder.endpoint_sample(sample)
        if self._live_metrics is not None:
            self._live_metrics.sample(sample.sample, sample.endpoint)
        if self._target_dead and not self._replicas_serve():  # the last replica serving went too
            self._stop(StopReason.ENGINE_DEATH, GRACE_S)

    def _replicas_serve(self) -> bool:
        """Whether a replica beside the target answered its last /health poll 200 (one not polled yet counts as
        serving): while one does, the target's death does not end the load ([load] stop_on_death)."""
        def serves(index: int, name: str) -> bool:
            health = self._recorder.watched.get(name, ([], []))[0]
            return index not in self._replica_exits and (not health or health[-1].healthy)
        return any(serves(i, r.name) for i, r in enumerate(self._replicas, 1))

    async def _send_load(self) -> None:
        """The backend's load; a worker that crashed ends it with a note, and the run keeps what was received."""
        try:
            await self._backend.run()
        except WorkerCrashed as crash:
            self._crash = str(crash)
            self._note(NoteSource.WORKERS, self._crash)  # the interrupted rule says it is loadrepro's failure
            self._stop(StopReason.WORKER_CRASHED, 0.0)

    def snapshot(self) -> RunResult:
        """What the run has recorded so far, as a result (for checkpoints while it goes on)."""
        return self._result(self._clock(), None, StopReason.RUNNING)

    def _result(self, end_ns: int, post: HealthSample | None, reason: StopReason) -> RunResult:
        recorded = self._recorder
        return RunResult(
            label=self.target.label, base_url=self.target.base_url, model=self.target.model,
            engine_cmd=self.target.engine_cmd, seed=self.profile.workload.seed, started_at=self._started_at,
            start_ns=self.live.started_ns, end_ns=end_ns, records=tuple(recorded.records),
            health=tuple(recorded.health), post_health=post, metrics=tuple(recorded.metrics),
            log_matches=tuple(recorded.matches), log_context=self._log_context(),
            notes=tuple(n for n in recorded.notes if n.source != NoteSource.RUN), stop_reason=reason,
            interrupted=reason == "interrupted", workers=self.workers, backend=self.backend, watch=self.profile.watch,
            canaries=tuple(recorded.canaries), stopped_ns=self._stopped_ns,
            tally=copy.deepcopy(recorded.tally), faults=tuple(sorted(self._chaos.faults, key=lambda f: f.at_ns)),
            progress_ns=self.client.activity.last_ns, worker_crash=self._crash, health_owner=self.target.health_owner,
            not_caused=tuple(sorted(self._chaos.not_caused, key=lambda f: f.at_s)),
            sampled_answers=recorded.sampled_answers(), slo=self.profile.slo,
            limits=self.target.limits, context=self.target.context, predictions=self.target.predictions,
            engine_running=None if self.target.engine_exit is None else self.target.engine_exit() is None,
            watched=tuple(self._watched(e) for e in self.profile.watch.endpoints),
            replicas=tuple(dataclasses.replace(self._watched(e), url=url, exit=self._replica_exits.get(i))
                           for i, (e, url) in enumerate(zip(self._replicas, self.client.config.replicas,
                                                            strict=True), 1)))

    def _log_context(self) -> tuple[str, ...]:
        """The lines before the first fatal line of the first log that had one, the target's before the
        replicas' (report.json log_excerpt quotes that log's first fatal line after them)."""
        logs = [w for w in (self._logs, *self._replica_logs) if w is not None]
        return next((w.context for w in logs if w.fatal_seen), logs[0].context if logs else ())

    def _watched(self, endpoint: WatchedEndpoint) -> Watched:
        health, metrics = self._recorder.watched.get(endpoint.name, ([], []))
        return Watched(endpoint.name, endpoint.health_url, endpoint.metrics_url, tuple(health), tuple(metrics))

    async def _watch(self, name: NoteSource, watcher: Coroutine[Any, Any, Any]) -> bool:
        """Runs a watcher; one that fails is a note in the report (False), and the load goes on without it."""
        try:
            await watcher
        except Exception as exc:  # noqa: BLE001 - loadrepro's watcher failing is no reason to cancel the load
            self._note(name, f"the {name} watcher stopped, so the report has nothing more from it: "
                             f"{type(exc).__name__}: {exc}")
            return False
        return True

    async def _check_health_before(self, health: HealthWatcher | None) -> None:
        if health is None:
            return
        before = await unless(self._interrupted, health.poll())
        if before is None:
            return
        self._judge.health_before(before.healthy)
        if not before.healthy:
            self._note(NoteSource.HEALTH, f"{self.profile.watch.health_path} answered {before.status} before the run: "
                                 "engine death is not judged from it")

    def _log_watcher(self) -> LogWatcher | None:
        """The profile's engine_log is followed from its end; a log of loadrepro's own engine from the start."""
        if self.profile.watch.engine_log:
            path, from_start = Path(self.profile.watch.engine_log), False
        elif self.target.engine_log is not None:
            path, from_start = self.target.engine_log, True
        else:
            return None
        return LogWatcher(path, self._on_sample, from_start, self.client.config.signatures, self._clock)

    async def _report_progress(self, progress: Callable[[LiveState], Awaitable[None]], stop: asyncio.Event) -> None:
        while not stop.is_set():
            await progress(self.live)
            await pause(stop, 0.5)
        self.live.finished = True
        await progress(self.live)
