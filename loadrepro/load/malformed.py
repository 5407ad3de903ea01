"""Requests no client should send ([[chaos.events]] action = "malformed"), each on a connection of its own: bytes
that are not UTF-8, JSON cut short, fields of the wrong types, a body far beyond any prompt, a negative max_tokens,
and (named only) a grammar that cannot compile.
An engine must refuse each with a 4xx and keep serving; what each got, and whether /health still answered 200
after it, is the fault's detail. /health is asked once after each, and watched for SETTLE_S after the last of a kind
when any of that kind got another answer: a kind costs at most SETTLE_S of waiting whatever its count, and an engine
that dies a moment after one of them is seen dead before the next kind is sent (the same kind's next request finds
it dead), so the death is that kind's. The first kind after which it stopped answering, or its /health turned, is the
culprit of rule bad_input_crash; another status while it kept serving (llama.cpp answers broken JSON with a 500)
is said as a warning."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import orjson

from loadrepro.config.profile import Api, MalformedKind
from loadrepro.records import FaultSpans
from loadrepro.workload.apis import PATHS

# "all": bad_grammar is sent only when named (vLLM's structured_outputs; other engines ignore the field and answer).
KINDS: tuple[MalformedKind, ...] = ("invalid_utf8", "bad_json", "wrong_types", "huge_body", "negative_max_tokens")
# A grammar no backend can compile: its root rule defined twice. vLLM 0.25.1 compiled it with the backend the first
# structured request had set up and its EngineCore died of the error (vllm-project/vllm#43920); 0.26.0 refuses it.
BAD_GRAMMAR = 'root ::= "a"\nroot ::= "b"'
HUGE_BODY_BYTES = 4 << 20  # a prompt far beyond any context (about a million tokens), quick to send here
ANSWER_S = 15.0  # how long a malformed request may take to be refused
# How long /health is watched after the last request of a kind that got an answer not a 4xx: vLLM 0.25.1 answered
# the bad grammar with a 500 and its process exited about half a second later, so a /health asked at once still
# said 200. Once per kind, not per request: llama.cpp answers every broken JSON with a 500, and 3 s after each of 8
# idled the run for most of a minute.
SETTLE_S = 3.0
SETTLE_POLL_S = 0.25


@dataclass(frozen=True, slots=True)
class Meanwhile:
    """What goes on in the run while malformed requests are sent: the faults on purpose that stop the engine (kill,
    restart, pause) as the run keeps them, so that one is sent only while none has the engine down, and one that met
    an outage is the outage's, not judged; and the load's end, after which none is sent (the run would wait for
    them: a 4 MiB body takes llama.cpp seconds to refuse)."""

    spans: FaultSpans = field(default_factory=FaultSpans)
    clock: Callable[[], int] = time.perf_counter_ns
    load_ended: Callable[[], bool] = lambda: False


@dataclass(frozen=True, slots=True)
class Sent:
    """What became of the malformed requests asked for."""

    refusals: list[Refusal]  # what each judged got
    unanswered: str  # not sent, the engine having stopped answering (or gone), in words ("bad_json x3, ...")
    after_load: str  # not sent, the load having ended
    met: str  # sent, but an outage on purpose met them: not judged


def body(kind: MalformedKind, api: Api, model: str) -> bytes:
    """The request body of one kind, for the run's `model` (an engine refuses an unknown model before it reads the
    rest, which would test nothing), salted so no prefix cache can hold it."""
    salt = secrets.token_hex(8)
    good = ({"messages": [{"role": "user", "content": f"malformed {salt}"}]} if api != "completions" else
            {"prompt": f"malformed {salt}"}) | {"model": model, "max_tokens": 4, "stream": True}
    match kind:
        case "invalid_utf8":
            return orjson.dumps(good).replace(salt.encode(), b"\xff\xfe\xc3\x28" + salt.encode())
        case "bad_json":
            return orjson.dumps(good)[:-7]
        case "wrong_types":
            wrong = {"messages": "not a list", "prompt": 12, "max_tokens": "four", "stream": "yes",
                     "temperature": [1]}
            return orjson.dumps({"model": model} | {k: v for k, v in wrong.items()
                                                          if k != ("prompt" if api != "completions" else "messages")})
        case "huge_body":  # a prompt of millions of tokens: refused at the body's size or at its length
            words = "the " * (HUGE_BODY_BYTES // 4)
            huge = {"messages": [{"role": "user", "content": f"malformed {salt} {words}"}]} if api != "completions" \
                else {"prompt": f"malformed {salt} {words}"}
            return orjson.dumps(good | huge)
        case "negative_max_tokens":
            return orjson.dumps(good | {"max_tokens": -7})
        case "bad_grammar":  # whole: the grammar is compiled after a stream's HTTP 200; a whole answer's status says
            return orjson.dumps(good | {"structured_outputs": {"grammar": BAD_GRAMMAR}, "stream": False})
    raise ValueError(f"unknown malformed kind {kind!r}")


@dataclass(frozen=True, slots=True)
class Refusal:
    kind: MalformedKind
    status: int | None  # None: no answer
    said: str  # the answer's first words, or why there was none
    healthy_after: bool  # /health answered 200 after it (watched for SETTLE_S after the last of its kind)

    @property
    def refused(self) -> bool:
        """Refused as a client's mistake should be: a 4xx, the engine still answering /health 200."""
        return _refused(self.status) and self.healthy_after

    @property
    def crashed(self) -> bool:
        """The engine stopped answering it, or /health turned after it: the engine's failure, not a wrong status."""
        return self.status is None or not self.healthy_after

    def describe(self) -> str:
        answer = f"HTTP {self.status}" if self.status is not None else "no answer"
        health = "" if self.healthy_after else "; /health not 200 after it"
        return f"{self.kind}: {answer}{f' ({self.said})' if self.said else ''}{health}"


async def post(session: aiohttp.ClientSession, url: str, data: bytes, api_key: str | None) -> tuple[int | None, str]:
    """One raw POST on a connection of its own: its status and first words, or None and why it got no answer."""
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {api_key}"} if api_key else {})}
    try:
        async with asyncio.timeout(ANSWER_S):
            async with session.post(url, data=data, headers=headers, allow_redirects=False) as response:
                text = (await response.content.read(300)).decode("utf-8", "replace")
                return response.status, " ".join(text.split())[:160]
    except TimeoutError:
        return None, f"nothing within {ANSWER_S:g} s"
    except aiohttp.ClientError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:160]


def _refused(status: int | None) -> bool:
    return status is not None and 400 <= status < 500


async def _healthy_after(settle: bool, healthy: Callable[[], Awaitable[bool]] | None,
                         gone: Callable[[], bool]) -> bool:
    """Whether the engine still serves after one answer (no health path: while it is not `gone()`): asked once;
    with `settle`, asked until SETTLE_S has passed, since an engine that failed a request may be dying behind a
    /health that still answers."""
    loop = asyncio.get_running_loop()
    settled = loop.time() + (SETTLE_S if settle else 0.0)
    while not gone() and (healthy is None or await healthy()):
        if loop.time() >= settled:
            return True
        await asyncio.sleep(SETTLE_POLL_S)
    return False


async def _engine_up(meanwhile: Meanwhile, gone: Callable[[], bool]) -> None:
    """Waits while an outage on purpose has the engine down (it ends within its recover_within_s, or `gone()`)."""
    while meanwhile.spans.going_on() and not gone():
        await asyncio.sleep(SETTLE_POLL_S)


async def send_malformed(base_url: str, api: Api, model: str, api_key: str | None, kinds: tuple[MalformedKind, ...],
                         count: int, healthy: Callable[[], Awaitable[bool]] | None,
                         gone: Callable[[], bool] = lambda: False,
                         meanwhile: Meanwhile | None = None) -> Sent:
    """`count` requests of each kind, in turn, `healthy` asked after each (no health path: taken as 200 while the
    engine is not `gone()`), and watched for SETTLE_S after the last of a kind when one of that kind was answered
    otherwise than with a 4xx; and, in words, those not sent: once one crashed the engine (or `gone()`), the rest
    would only wait on a broken engine (each up to ANSWER_S) and could tell nothing of how it takes them, or once
    the load ended; and those an outage on purpose met (from the request to the last /health asked after it): the
    outage's doing, not judged."""
    url = base_url.rstrip("/") + PATHS[api]
    refusals: list[Refusal] = []
    planned = [(kind, i == count - 1) for kind in kinds for i in range(count)]
    connector = aiohttp.TCPConnector(force_close=True)  # a connection of its own each: not the load's pool
    otherwise: set[MalformedKind] = set()  # kinds of which one was answered otherwise than with a 4xx
    met: list[MalformedKind] = []  # sent, but an outage on purpose met them
    meanwhile = meanwhile or Meanwhile()
    ended = False
    async with aiohttp.ClientSession(connector=connector) as session:
        for kind, last in planned:
            await _engine_up(meanwhile, gone)
            if gone() or any(r.crashed for r in refusals):
                break
            if ended := meanwhile.load_ended():
                if refusals and refusals[-1].kind in otherwise:  # its kind's watch of /health, cut short
                    settled = await _healthy_after(True, healthy, gone)
                    refusals[-1] = dataclasses.replace(refusals[-1], healthy_after=settled)
                break
            began = meanwhile.clock()
            status, said = await post(session, url, body(kind, api, model), api_key)
            if not _refused(status):
                otherwise.add(kind)
            refusal = Refusal(kind, status, said, await _healthy_after(last and kind in otherwise, healthy, gone))
            if meanwhile.spans.overlaps(began, meanwhile.clock()):
                met.append(kind)
            else:
                refusals.append(refusal)
    left = _counted([kind for kind, _ in planned[len(refusals) + len(met):]])
    return Sent(refusals, "" if ended else left, left if ended else "", _counted(met))


def _counted(kinds: list[MalformedKind]) -> str:
    return ", ".join(f"{kind} x{kinds.count(kind)}" for kind in dict.fromkeys(kinds))
