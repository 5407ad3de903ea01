"""The first stage of a run: the target it loads, given as a URL, or engines loadrepro starts and stops (the
user's --engine-cmd, else the embedded simulated engine, as processes or on threads of this process), with their
replicas."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from loadrepro.config.defaults import sim_in_process
from loadrepro.config.profile import OUTAGES
from loadrepro.errors import UsageError
from loadrepro.load.engine import ManagedEngine
from loadrepro.records import replica_name
from loadrepro.runs.heap import resume
from loadrepro.runs.progress import Say
from loadrepro.runs.run_options import RunOptions
from loadrepro.sim.process import as_typed, sim_engine_command


@dataclass(frozen=True, slots=True)
class Started:
    """An engine loadrepro started, as the run follows it: where it serves, its log, its exit."""

    url: str
    log: Path
    exit_code: Callable[[], int | None]  # None while it runs


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    counter_is_local: bool  # the simulated engine's tokenizer runs in process
    engine: ManagedEngine | None = None  # the target's process, when loadrepro started one: for faults on purpose
    started: tuple[Started, ...] = ()  # the engines loadrepro started, the target first, then --replicas N's
    command: str | None = None  # how the engine loadrepro started was started, as the report shows it
    template: str | None = None  # that command as given, {port} and {host} unfilled: how to start it again


def log_of(run_dir: Path, replica: int) -> Path:
    return run_dir / (f"engine-{replica_name(replica)}.log" if replica else "engine.log")


def role(replica: int) -> str:
    return "target" if not replica else replica_name(replica)


@contextlib.asynccontextmanager
async def started_target(options: RunOptions, run_dir: Path, say: Say) -> AsyncIterator[Target]:
    """The URL to load: given, or an engine loadrepro starts (the user's command, else the simulated engine)."""
    if options.base_url is not None:
        if stopping := sorted({e.action for e in options.profile.chaos.events} & OUTAGES):
            raise UsageError(f"[[chaos.events]] {', '.join(stopping)} stop and start the engine, which needs an "
                             f"engine loadrepro starts (--engine-cmd, or the simulated engine), not a URL "
                             f"({options.base_url})")
        yield Target(options.base_url, False)
        return
    if options.engine_cmd is None and sim_in_process() and not any(
            e.action in OUTAGES for e in options.profile.chaos.events):
        async with _sims_in_threads(options, run_dir, say) as target:
            yield target
        return
    command = options.engine_cmd or sim_engine_command(options.profile.sim)
    engines = [ManagedEngine(command, log_of(run_dir, i), health_path=options.profile.watch.health_path or "/health",
                             api_key=options.api_key)
               for i in range(options.replicas)]
    if options.engine_cmd:  # a real engine may take minutes to start: its polls' garbage is collected meanwhile
        resume()
    try:
        urls = []
        for i, engine in enumerate(engines):  # one at a time: each takes the machine's cores while it loads
            urls.append(await engine.astart(options.engine_start_timeout_s))
            what = "engine" if options.engine_cmd else (
                f"embedded simulated engine ({options.profile.sim.scenario}, {options.profile.sim.policy} policy)")
            say(f"{role(i)}: the {what} at {urls[-1]} (pid {engine.pid}); its log is {engine.log}")
        first = engines[0]
        yield Target(urls[0], options.engine_cmd is None, first,
                      tuple(Started(e.url, e.log, e.exit_code) for e in engines),
                      first.command if options.engine_cmd else as_typed(first.command),
                      options.engine_cmd or as_typed(command))
    finally:
        await _stop_all(engines, say)


@contextlib.asynccontextmanager
async def _sims_in_threads(options: RunOptions, run_dir: Path, say: Say) -> AsyncIterator[Target]:
    """The embedded simulated engine (and its --replicas) served on threads of this process (SIM_IN_PROCESS_ENV)."""
    from loadrepro.sim.config import resolve as resolve_sim  # the server's stack, imported only by who serves here
    from loadrepro.sim.serve import SimThread

    spec = options.profile.sim
    sims = [SimThread(resolve_sim(spec), log_of(run_dir, i)) for i in range(options.replicas)]
    try:
        for i, sim in enumerate(sims):
            await asyncio.to_thread(sim.start)
            say(f"{role(i)}: the embedded simulated engine ({spec.scenario}, {spec.policy} policy) at {sim.url} "
                f"(on a thread of this process); its log is {sim.log_path}")
        host, port = sims[0].url.removeprefix("http://").rsplit(":", 1)
        template = as_typed(sim_engine_command(spec))
        yield Target(sims[0].url, True, None, tuple(Started(s.url, log_of(run_dir, i), s.exit_code)
                                                      for i, s in enumerate(sims)),
                      template.replace("{host}", host).replace("{port}", port), template)
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
