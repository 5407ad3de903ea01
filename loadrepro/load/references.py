"""References for answers checked under load ([verify]): after the load, on the idle engine, each chosen request
is sent again alone through the run's own client, and its load answer is judged against that one
(judge/answers.py). Where the engine offers a prefix-cache reset (vLLM's `POST /reset_prefix_cache`, served in
its dev mode; SGLang's `POST /flush_cache`) it is reset before each, so that every reference is computed cold and
a corrupted cache cannot answer for both sides. Nothing here is sent before the load has ended."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from loadrepro.config.profile import VerifySpec
from loadrepro.load.client import Client
from loadrepro.load.transport import NoAnswer, Transport
from loadrepro.records import AnswerCheck, RequestRecord
from loadrepro.workload.conversations import MARKER, marker
from loadrepro.workload.model import Workload

RESETS = ("/reset_prefix_cache", "/flush_cache")  # vLLM (VLLM_SERVER_DEV_MODE=1), SGLang


@dataclass(frozen=True, slots=True)
class Verified:
    checks: tuple[AnswerCheck, ...]
    chosen: int  # requests chosen to check (more than checked when stopped early)
    reset: str | None  # the path that reset the prefix cache before each reference, if any
    seconds: float  # sending the references took
    references: tuple[RequestRecord, ...] = ()  # what each answered alone, in the order of `checks`
    offered: str | None = None  # a reset path the target serves, whether or not every reset worked

    @property
    def note(self) -> str:
        if self.reset:
            cold = f"the prefix cache reset before each (POST {self.reset}), so each was computed cold"
        elif self.offered:
            cold = f"POST {self.offered} did not always answer 200, so a reference may have met a warm cache"
        else:
            cold = ("the target offers no prefix-cache reset (vLLM: VLLM_SERVER_DEV_MODE=1), so a reference may have "
                    "met a cache its own turn warmed")
        stopped = f" (stopped after {len(self.checks)} of {self.chosen})" if len(self.checks) < self.chosen else ""
        return (f"answers: {len(self.checks)} checked against the same request sent alone after the load, in "
                f"{self.seconds:.1f} s{stopped}; {cold}")


async def reset_path(http: Transport) -> str | None:
    """The first of RESETS the target serves, asked with OPTIONS, which resets nothing: 405 (a route for other
    methods) says it is there, 404 that it is not. (llama.cpp answers any OPTIONS 200 for CORS, whatever the path:
    that says nothing.)"""
    for path in RESETS:
        answered = await http.fetch("OPTIONS", path, None, timeout_s=30.0)
        if not isinstance(answered, NoAnswer) and answered.status == 405:
            return path
    return None


async def reset(http: Transport, path: str) -> bool:
    answered = await http.fetch("POST", path, None, timeout_s=30.0)
    return not isinstance(answered, NoAnswer) and answered.status == 200


def markers_of(workload: Workload) -> dict[str, int]:
    """Each conversation's tag, to its conversation (a trace's requests carry none)."""
    if workload.kind != "conversations":
        return {}
    return {marker(workload.seed, c.index): c.index for c in workload.conversations}


async def verify_answers(client: Client, http: Transport, workload: Workload, records: Iterable[RequestRecord],
                         spec: VerifySpec, stop: asyncio.Event,
                         progress: Callable[[int, int], None] = lambda done, total: None,
                         clock: Callable[[], int] = time.perf_counter_ns) -> Verified:
    """Send each chosen request alone, in order, until done or `stop` is set; judge each load answer."""
    # The answers' judge (and the measurements it reads) is imported here, after the load: a run imports this
    # module for its cache reset (load/cache_reset.py) before its first request.
    from loadrepro.judge.answers import check, choose

    chosen = choose(records, spec, workload.seed)
    planned = {(r.conversation, r.turn): r for r in workload.requests}
    markers = markers_of(workload)
    started = clock()
    path = await reset_path(http) if chosen else None
    cold = path is not None
    checks: list[AnswerCheck] = []
    references: list[RequestRecord] = []
    for load in chosen:
        if stop.is_set():
            break
        if path is not None:
            cold = await reset(http, path) and cold
        reference = await client.send(load.id, planned[(load.conversation, load.turn)], clock(), time.time(),
                                      lambda record: None)
        references.append(reference)
        checks.append(check(load, reference, spec, markers, MARKER))
        progress(len(checks), len(chosen))
    return Verified(tuple(checks), len(chosen), path if cold else None, (clock() - started) / 1e9, tuple(references),
                    path)
