"""Faults on purpose ([[chaos.events]]), caused at their time while the load runs: kill, restart or pause the
engine loadrepro started, cancel streams in flight, or send one request the engine can never hold. Each becomes a
Fault: what was done, and when /health answered 200 again (polled every BACK_POLL_S, for up to the event's
recover_within_s after loadrepro's part of it ended: the engine started again, or SIGCONT sent). Judging whether
the engine recovered is judge/recovery.py's, from the run's samples.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from loadrepro.config.profile import Api, ChaosEvent
from loadrepro.judge.findings import counted, grouped
from loadrepro.load.malformed import KINDS, Meanwhile, send_malformed
from loadrepro.load.watch.canary import one_token_request
from loadrepro.records import Fault, FaultSpans, Outcome, RequestRecord
from loadrepro.workload.model import PlannedRequest

BACK_POLL_S = 0.25
OVERSIZE_MARGIN = 64  # tokens beyond the limit: "just beyond", whatever a chat template adds or a tokenizer merges
COMMON_WORDS = ("the", "of", "and", "to", "in", "is", "it")  # one token each in every mainstream tokenizer


class EngineControl(Protocol):
    """What a fault needs of an engine loadrepro started (load/engine.py's ManagedEngine)."""

    @property
    def pid(self) -> int | None: ...

    async def kill(self) -> str: ...

    async def terminate(self, grace_s: float = 30.0) -> str: ...

    def restart(self, why: str) -> str | None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ChaosTools:
    """What the runner lends its faults."""

    engine: EngineControl | None
    abort: Callable[[int], Awaitable[tuple[int, int]]]  # cancel N requests mid-answer; how many, how many mid-answer
    send: Callable[[PlannedRequest], Awaitable[RequestRecord]]  # one request outside the load
    healthy: Callable[[], Awaitable[bool]] | None  # one /health poll (None: no health path to ask)
    api: Api = "chat"
    oversize: Oversize | None = None  # just beyond what the engine can ever hold (None: its limits are unknown)
    clock: Callable[[], int] = time.perf_counter_ns
    base_url: str = ""  # malformed requests go to the target itself, on connections of their own
    api_key: str | None = None
    model: str = ""  # the run's model: malformed requests name it, so that the engine reads the rest of them
    # True once waiting for the engine is pointless: its process exited, its death was judged, or the run was
    # interrupted. Every wait of a fault ends then, and no more malformed requests are sent.
    gone: Callable[[], bool] = lambda: False
    # The run's faults on purpose as they happen: malformed requests wait while one has the engine down, and one
    # that met it is its doing.
    spans: FaultSpans = field(default_factory=FaultSpans)
    load_ended: Callable[[], bool] = lambda: False  # no more malformed requests are sent then


@dataclass(frozen=True, slots=True)
class Oversize:
    """A request's prompt just beyond what the engine can ever hold, and the limit it overruns, in words."""

    tokens: int
    limit: str


def oversize(max_seq_len: int, pool_tokens: int | None, source: str) -> Oversize:
    """Just beyond what an engine can ever hold: its longest sequence, or its whole KV pool if that is smaller (a
    request the length check admits but no amount of waiting fits: vllm#39734). `source`: where the limits came
    from."""
    if pool_tokens is not None and pool_tokens < max_seq_len:
        return Oversize(pool_tokens + OVERSIZE_MARGIN, f"its KV pool of {pool_tokens:,} tokens ({source})")
    return Oversize(max_seq_len + OVERSIZE_MARGIN, f"its longest sequence of {max_seq_len:,} tokens ({source})")


def oversize_request(api: Api, tokens: int) -> PlannedRequest:
    """A one-token request whose prompt is `tokens` common words (a token each), starting with a salt so it
    shares no prefix with the run."""
    words = " ".join(COMMON_WORDS[i % len(COMMON_WORDS)] for i in range(tokens))
    return one_token_request(api, f"oversize {secrets.token_hex(8)} {words}")


async def cause(event: ChaosEvent, tools: ChaosTools, began: Callable[[int], None]) -> Fault:
    """The fault, then the wait for /health 200. `began` is told the moment it is caused (before anything is
    awaited), so the runner can treat requests failing from then on as the fault's."""
    at_ns = tools.clock()
    began(at_ns)
    within = int(event.recover_within_s * 1e9)
    culprit: str | None = None
    unrefused: tuple[str, ...] = ()
    if event.outage:  # /health is asked once the engine is running again
        detail, clean = await _act(event, tools)
        done_ns = tools.clock()
        back_ns = await _back(tools, done_ns + within)
    elif event.action == "malformed":  # each asked /health after it; then back, when it turned
        detail, clean, culprit, unrefused = await _malformed(event, tools)
        done_ns = tools.clock()
        back_ns = await _back(tools, done_ns + within)
    else:  # the engine kept running: asked meanwhile, since an oversize request may wait for long
        done_ns = at_ns
        (detail, clean), back_ns = await asyncio.gather(_act(event, tools), _back(tools, at_ns + within))
    return Fault(event.action, at_ns, done_ns, back_ns, event.recover_within_s, detail, clean, culprit, unrefused)


async def _malformed(event: ChaosEvent, tools: ChaosTools) -> tuple[str, bool, str | None, tuple[str, ...]]:
    """The requests of each kind asked for, and what each got: clean unless the engine stopped answering one, or
    its /health turned after one (the first such, the culprit); and those answered otherwise than with a 4xx while
    it kept serving."""
    kinds = KINDS if event.kind == "all" else (event.kind,)

    async def back() -> bool:  # /health 200 within recover_within_s: one slow or failed poll is not a crash
        return await _back(tools, tools.clock() + int(event.recover_within_s * 1e9)) is not None

    sent = await send_malformed(tools.base_url, tools.api, tools.model, tools.api_key, kinds, event.count,
                                back if tools.healthy else None, tools.gone,
                                Meanwhile(tools.spans, tools.clock, tools.load_ended))
    refusals = sent.refusals
    culprit = next((r for r in refusals if r.crashed), None)
    unrefused = tuple(r.describe() for r in refusals if not r.refused and not r.crashed)
    rest = "".join(f"; {why}: {which}" for why, which in (
        ("not sent, the engine having stopped answering", sent.unanswered),
        ("not sent, the load having ended", sent.after_load),
        ("not judged, a fault on purpose having stopped the engine meanwhile", sent.met)) if which)
    said = "; ".join(grouped(r.describe() for r in refusals))
    return (f"{counted(len(refusals), 'malformed request')}: {said}{rest}", culprit is None,
            culprit.describe() if culprit else None, unrefused)


async def _act(event: ChaosEvent, tools: ChaosTools) -> tuple[str, bool]:
    engine, when = tools.engine, f"at {event.at_s:g} s"
    match event.action:
        case "abort_burst":
            cancelled, answering = await tools.abort(event.count)
            return (f"cancelled {cancelled} of the requests in flight, {answering} of them mid-answer (asked for "
                    f"{event.count})"), True
        case "oversize":
            return await _oversize(tools)
    assert engine is not None, "kill, restart and pause are refused without a managed engine (api.run_options)"
    pid = engine.pid
    match event.action:
        case "kill":
            how = await engine.kill()
            await asyncio.sleep(event.duration_s)
            why = engine.restart(f"killed {when} (chaos), started again")
            return f"SIGKILL to pid {pid} ({how}); started again after {event.duration_s:g} s" + _failed(why), True
        case "restart":
            how = await engine.terminate()
            why = engine.restart(f"restarted {when} (chaos)")
            return f"SIGTERM to pid {pid} ({how}); started again" + _failed(why), True
        case "pause":
            engine.pause()
            try:
                await asyncio.sleep(event.duration_s)
            finally:
                engine.resume()  # never left stopped, even when the run is interrupted meanwhile
            return f"SIGSTOP to pid {pid}'s process group for {event.duration_s:g} s, then SIGCONT", True
    raise ValueError(f"unknown chaos action {event.action!r}")


def _failed(why: str | None) -> str:
    return f", but it could not be started: {why}" if why else ""


async def _oversize(tools: ChaosTools) -> tuple[str, bool]:
    """One request just beyond what the engine can hold: a clean refusal is right; being served says loadrepro's
    limits were wrong (not the engine's failure); anything else is the engine failing at it."""
    if tools.oversize is None:
        return "not sent: the target's limits are unknown (add an [engine] section)", True
    record = await tools.send(oversize_request(tools.api, tools.oversize.tokens))
    size = f"a request of {tools.oversize.tokens:,} prompt tokens, beyond {tools.oversize.limit},"
    took = f"{(record.end_ns - record.sent_or_queued_ns) / 1e9:.1f} s"
    match record.outcome:
        case Outcome.REJECTED:
            return f"{size} was refused cleanly in {took}: {record.detail[:200]}", True
        case Outcome.OK:
            return f"{size} was served in {took}: the engine held more than loadrepro's limits said", True
    return f"{size} ended {record.outcome} after {took}, not a clean refusal: {record.detail[:200]}", False


async def _back(tools: ChaosTools, deadline_ns: int) -> int | None:
    """When /health answered 200 (without a health path: at once); None when not by `deadline_ns`."""
    if tools.healthy is None:
        return tools.clock()
    while not tools.gone():
        if await tools.healthy():
            return tools.clock()
        if tools.clock() >= deadline_ns:
            return None
        await asyncio.sleep(BACK_POLL_S)
    return None  # it will not come back, or the run no longer waits for it
