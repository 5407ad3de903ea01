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
from loadrepro.load.after_load import SETTLE_S, last_health, settle_metrics
from loadrepro.load.backend import backend_for
from loadrepro.load.backend.base import LoadBackend, LoadSetup, WorkerCrashed
from loadrepro.load.client import Client
from loadrepro.load.engine_exit import EngineExit
from loadrepro.load.faults import FaultsOnPurpose, lent_tools
from loadrepro.load.live import LiveState, report_progress
from loadrepro.load.live_metrics import LiveMetrics
from loadrepro.load.pause import pause, unless
from loadrepro.load.recorder import Recorder
from loadrepro.load.routed_turns import RoutedTurns
from loadrepro.load.run_target import RunTarget
from loadrepro.load.transport import Transport
from loadrepro.load.watch.canary import Canaries
from loadrepro.load.watch.endpoint_polls import watch_endpoint
from loadrepro.load.watch.health_polls import HealthWatcher
from loadrepro.load.watch.introspection import INTROSPECTION, watch_introspection
from loadrepro.load.watch.logs import LogWatcher, engine_log, fatal_context
from loadrepro.load.watch.memory import MemoryWatcher, Milestones, readable
from loadrepro.load.watch.metrics_scrapes import MetricsWatcher, progressed
from loadrepro.load.watch.replicas import Replicas
from loadrepro.records import (
    FAILED,
    KV_USAGE,
    CanarySample,
    EndpointSample,
    HealthSample,
    MetricsSample,
    Note,
    NoteSource,
    Outcome,
    RequestRecord,
    RunEnd,
    RunResult,
    Sample,
    StopReason,
    Tally,
    Watched,
)
from loadrepro.records.redact import scrub
from loadrepro.workload.model import Workload

GRACE_S = 10.0  # how long requests in flight may finish once the run stops starting new ones
FAILING_AT_THE_END = (Outcome.TRUNCATED, Outcome.UNREACHABLE)  # the last outcome when the engine may be exiting


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
        self._recorder = Recorder.of_run(profile, out_dir,
                                         target.engine is None and profile.watch.memory_interval_s > 0,
                                         target.predictions)
        self._health: HealthWatcher | None = None
        self._stopped = asyncio.Event()  # set once no new request may start
        self._interrupted = asyncio.Event()  # set by Ctrl-C or SIGTERM: every wait after the load ends
        self._stop_reason: StopReason | None = None
        self._stopped_ns: int | None = None
        self._load_task: asyncio.Task[None] | None = None
        self._crash: str | None = None  # how a load worker failed
        self._replicas = Replicas(client.config.replicas, target.started_replicas, profile.watch,
                                  client.config.signatures, self._on_sample, clock, self._recorder.watched,
                                  self._recorder.written)
        self._target_dead = False
        self._engine = EngineExit(target.engine_exit, self._engine_exited)
        engine = target.engine
        self._memory = MemoryWatcher(lambda: engine.pid if self._engine.running() else None,
                                     profile.watch.memory_interval_s, self._on_sample, clock,
                                     lambda: sum(self.live.outcomes.values())) \
            if engine is not None and profile.watch.memory_interval_s > 0 and readable() else None
        self._metrics: MetricsWatcher | None = None
        # Memory is read at request milestones too, not only on the clock: a run of 300 requests in half a second
        # would otherwise be read twice, too few to tell growth with the requests from a warm-up.
        planned = sum(len(c.turns) for c in workload.conversations)
        self._milestones = Milestones(None if self._load.duration_s else planned) \
            if profile.watch.memory_interval_s > 0 else Milestones(None)
        self._judge = LiveJudge(frozenset(s.name for s in client.config.signatures if s.upstream))
        self._started_at = ""
        self._logs: LogWatcher | None = None
        self._canaries: Canaries | None = None
        self._turns = RoutedTurns(client.config.spreads_conversations)
        self._chaos = FaultsOnPurpose(list(profile.chaos.events), clock, self._stopped, self._note,
                                      self._recorder.written)
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
        record = self._turns.expected(self._chaos.after_wipe(record))
        self._recorder.record(record)
        if self._live_metrics is not None:
            self._live_metrics.record(record)
        self.live.outcomes[record.outcome] += 1
        if self._milestones.passed(sum(self.live.outcomes.values())):
            self._read_memory_now()
        if record.replica:  # another replica's: its death is judged by its /health (rule replica_death)
            return
        self._judged(self._judge.request_ended(record.outcome, record.signature, record.end_ns,
                                               self.client.activity.last_ns))
        if self._judge.failed(record.outcome) and self._health is not None:
            self._health.poke()

    def _read_memory_now(self) -> None:
        """A reading of the engine's memory now: from /proc for an engine loadrepro started, else by a scrape of
        the /metrics that publish it (a target at a URL)."""
        if self._memory is not None:
            self._memory.poke()
        elif self._recorder.rss_from_metrics and self._metrics is not None:
            self._metrics.poke()

    def _on_sample(self, sample: Sample) -> None:
        if isinstance(sample, MetricsSample):  # what the engine's running count is judged against: its own requests
            # in flight when the scrape was sent or when it was answered, whichever were more: the engine counted
            # at some moment between, and a request that ended meanwhile was still running for it then
            sample = dataclasses.replace(sample, in_flight=max(self._at_target(), sample.in_flight or 0))
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
                if previous is not None and progressed(previous.values, values):
                    # A scrape is stamped when it was sent; one a busy engine answered late must not move the
                    # engine's last progress back past the tokens that came meanwhile (that read a streaming engine,
                    # its /health starved, as dead).
                    self.client.activity.last_ns = max(self.client.activity.last_ns, sample.t_ns)
                self.live.kv_usage = values.get(KV_USAGE, self.live.kv_usage)

    def _at_target(self) -> int:
        """loadrepro's requests in flight at the target: the load's, and a canary (the engine runs it too)."""
        return self.live.at_target + (self._canaries.in_flight if self._canaries is not None else 0)

    def _note(self, source: NoteSource, text: str) -> None:
        self._on_sample(Note(self._clock(), source, scrub(text)))

    def _judge_health(self, sample: HealthSample) -> None:
        runs = bool(self._engine.running())
        self._judged(self._judge.health_polled(sample.t_ns, sample.status, self.client.activity.last_ns, runs))

    def _judged(self, death: Death | None) -> None:
        """A death the judge saw: noted at the time it began (the engine_death rule reports it), and the load
        stopped unless the engine already exited (noted then)."""
        if death is None or self._stop_reason is not None:
            return
        self._on_sample(Note(death.t_ns, NoteSource.DEATH, scrub(death.words)))
        self._engine_died()

    def _engine_exited(self, words: str) -> None:
        self._note(NoteSource.ENGINE, words)
        self._engine_died()

    def _gone(self) -> bool:
        """A fault's waits for the engine end: it exited or died, or the run was interrupted."""
        return self._target_dead or self._stop_reason is StopReason.INTERRUPTED or self._engine.exited()

    async def _settle_metrics(self, metrics: MetricsWatcher) -> None:
        """After an interrupt, one scrape: the user is waiting for the exit, and an interrupted run proves nothing.
        With the engine dead or its /health not 200, one too: a dead engine's metrics are frozen, and zombies are
        not judged on an engine that left service."""
        down = self._stop_reason is StopReason.ENGINE_DEATH or self._judge.dead or self.live.health not in (200, None)
        settle_s = 0.0 if self._stop_reason is StopReason.INTERRUPTED or down else SETTLE_S
        await settle_metrics(metrics, lambda: self._recorder.metrics[-1].values if self._recorder.metrics else {},
                             settle_s, self._interrupted, self._clock)

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
        if self._replicas.serve() and self._load_task is not None and not self._load_task.done():
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
                logs = self._logs = engine_log(self.profile.watch.engine_log, self.target.engine_log, self._on_sample,
                                                self.client.config.signatures, self._clock)
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
                    metrics = self._metrics = MetricsWatcher(
                        http, watch.metrics_path, watch.metrics_interval_s, self._on_sample,
                        self._clock, self._at_target) if watch.metrics_path else None
                    if metrics and self.profile.chaos.events:  # the quiet moment each fault's KV is held to
                        await self._watch(NoteSource.METRICS, metrics.scrape())
                    for source, watcher in self._watchers(health, metrics, logs, stop_watching):
                        tg.create_task(self._watch(source, watcher))
                    if self._engine.managed:
                        tg.create_task(self._engine.watch(stop_watching))
                    if progress:
                        tg.create_task(report_progress(self.live, progress, stop_watching))
                    self._load_task = tg.create_task(self._send_load())
                    deadline = (loop.call_later(self._load.duration_s, self._stop, StopReason.DURATION, GRACE_S)
                                if self._load.duration_s else None)
                    self._chaos.schedule(lent_tools(self.target, self.client.config, self._backend.abort, health,
                                                    self._clock, self._gone, self._chaos.spans))
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
                    last = self._recorder.last
                    await self._engine.settle(last is not None and last.outcome in FAILING_AT_THE_END)
                    stop_watching.set()
                for text in self._backend.notes():
                    self._note(NoteSource.WORKERS, text)
                if metrics:  # the state the load left behind, even when it was quicker than a scrape
                    await self._watch(NoteSource.METRICS, self._settle_metrics(metrics))
                if self._memory is not None:  # what the engine holds once idle: memory that did not come back
                    await self._watch(NoteSource.ENGINE, self._memory.read())
                if logs and not logs.found:
                    self._note(NoteSource.ENGINE_LOG,
                               f"{logs.path} never appeared, so no error signature was read from it")
                end_ns = self._clock()
                post = None if health is None else await last_health(
                    health, self._interrupted, watch.health_interval_s, self._engine.exited)
                if resent := http.reconnects:
                    self._note(NoteSource.CONTROL, f"{resent} health/metrics requests resent on a new connection: the "
                                          "target had closed the pooled one (not unhealthy polls)")
            self._recorder.written(RunEnd(end_ns, post, self.client.activity.last_ns, self._stopped_ns,
                                          self._engine.running(), self._crash))
        finally:
            self._recorder.close()
        # The load and its watchers are over and the recorder closed: nothing counts into its tally any more.
        return self._result(end_ns, post, self._stop_reason or StopReason.DONE, self._recorder.tally)

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
            canaries = self._canaries = Canaries(self.client.config.alone(), watch.canary_interval_s,
                                                 self.client.activity, self._on_sample, self._clock)
            table.append((NoteSource.CANARY, canaries.run(stop)))
        if self._load.stop_when_saturated:
            table.append((NoteSource.SATURATION, self._watch_saturation(stop)))
        if self._memory is not None:
            table.append((NoteSource.ENGINE, self._memory.run(stop)))
        if watch.introspection_path.startswith("/"):  # "auto" is made a path (or none) before a run
            table.append((NoteSource.HEALTH, watch_introspection(self.target.base_url, self.client.config.api_key,
                                                                 watch, self._recorder.endpoint_sample, self._clock,
                                                                 stop)))
        table += [(NoteSource.HEALTH, watch_endpoint(endpoint, watch, self._on_endpoint_sample, self._clock, stop))
                  for endpoint in watch.endpoints]
        return table + self._replicas.watchers(self._on_endpoint_sample, self._last_replica_gone, stop)

    def _last_replica_gone(self) -> None:
        """A replica exited or was polled: the load ends when the target is dead and no replica serves now."""
        if self._target_dead and not self._replicas.serve():
            self._stop(StopReason.ENGINE_DEATH, GRACE_S)

    def _on_endpoint_sample(self, sample: EndpointSample) -> None:
        self._recorder.endpoint_sample(sample)
        if self._live_metrics is not None:
            self._live_metrics.sample(sample.sample, sample.endpoint)
        self._last_replica_gone()

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
        return self._result(self._clock(), None, StopReason.RUNNING, copy.deepcopy(self._recorder.tally))

    def _result(self, end_ns: int, post: HealthSample | None, reason: StopReason, tally: Tally) -> RunResult:
        recorded = self._recorder
        return RunResult(
            label=self.target.label, base_url=self.target.base_url, model=self.target.model,
            engine_cmd=self.target.engine_cmd, seed=self.profile.workload.seed, started_at=self._started_at,
            start_ns=self.live.started_ns, end_ns=end_ns, records=tuple(recorded.records),
            health=tuple(recorded.health), post_health=post, metrics=tuple(recorded.metrics),
            log_matches=tuple(recorded.matches), log_context=fatal_context([self._logs, *self._replicas.logs]),
            notes=tuple(n for n in recorded.notes if n.source != NoteSource.RUN), stop_reason=reason,
            interrupted=reason == "interrupted", workers=self.workers, backend=self.backend, watch=self.profile.watch,
            canaries=tuple(recorded.canaries), stopped_ns=self._stopped_ns, memory=tuple(recorded.memory),
            introspection=tuple(recorded.watched.get(INTROSPECTION, ([], []))[0]),
            tally=tally, faults=tuple(sorted(self._chaos.faults, key=lambda f: f.at_ns)),
            progress_ns=self.client.activity.last_ns, worker_crash=self._crash, health_owner=self.target.health_owner,
            not_caused=tuple(sorted(self._chaos.not_caused, key=lambda f: f.at_s)),
            sampled_answers=recorded.sampled_answers(), slo=self.profile.slo,
            limits=self.target.limits, context=self.target.context, predictions=self.target.predictions,
            fresh_engine_ns=self.target.fresh_engine_ns,
            engine_running=self._engine.running(),
            watched=tuple(self._watched(e) for e in self.profile.watch.endpoints),
            replicas=self._replicas.watched(self._watched))

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
