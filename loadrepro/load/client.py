"""One request to a target's generation API (chat, completions, Responses, Messages) -> one RequestRecord, with SSE
timing. Never raises on target faults.

The hot path is aiohttp's client, read chunk by chunk: measured in benchmarks/client_overhead.py, httpx (even on
the aiohttp transport) plus httpx-sse cost about twice a bare aiohttp loop per streamed chunk, and at 256 streams
that shows as TTFT error; orjson parses each chunk at a fifth of json's cost.

Connections, credentials and the resend of a request that met a pooled connection the server had closed are the
transport's (load/transport.py); what reaches this client is what the target did.

Silence: after its first token a stream that gets no byte for `stall_timeout_s` is stalled. Before its first token
a request is waiting, which queueing engines do for minutes, as long as the engine makes progress (a token on any
stream, or its metrics moving, see `Activity`) or its own stream gets bytes; when none of that happens for
`stall_timeout_s` the request is stalled (the engine hangs, or what it runs is not loadrepro's: judge/waits.py).
`ttft_timeout_s` bounds the wait for the first token; `request_timeout_s` the whole request. 429, 503 with
Retry-After and a 503 inside a stream are retried with bounded backoff before they count as throttled. Every fault
is mapped to an Outcome in load/outcomes.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import aiohttp
import orjson

from loadrepro.config.profile import Api, Routing
from loadrepro.judge.signatures import CATALOG, Signature, match
from loadrepro.load.answer_text import AnswerParts
from loadrepro.load.outcomes import (
    TARGET_FAULTS,
    outcome_for_exception,
    outcome_for_status,
    outcome_for_stream_error,
    retry_after,
)
from loadrepro.load.sse import SseStream
from loadrepro.load.streams import CONTENT, END_MARKS, READERS, Attempt, ProtocolViolation, error_of, whole_answer
from loadrepro.load.transport import Transport, off_origin, redirected
from loadrepro.records import ANSWER_CHARS, Outcome, RequestRecord
from loadrepro.workload.apis import PATHS, count_of, wire_body
from loadrepro.workload.model import PlannedRequest
from loadrepro.workload.structured_requests import asked, mismatch

DETAIL_LIMIT = 4096

_JSON = {"content-type": "application/json"}
_YIELD_EVERY_NS = 2_000_000  # a stream that never waits for bytes lets the others run at least this often


class Progress(Protocol):
    """When the engine last made progress (ns), read and marked by every request of a run: an `Activity` in this
    process, or one every worker process shares (load/backend/processes.py)."""

    last_ns: int


@dataclass(slots=True)
class Activity:
    """When the engine last made progress, shared by every request of a run: the client marks each token it
    receives, the runner marks metrics that moved. A request waiting for its first token is not stalled while
    this moves."""

    last_ns: int = 0


@dataclass(frozen=True, slots=True)
class ClientConfig:
    base_url: str
    api: Api
    model: str
    concurrency: int
    request_timeout_s: float
    stall_timeout_s: float
    api_key: str | None = None
    ttft_timeout_s: float = 0.0  # > 0: the longest wait for the first token (else request_timeout_s bounds it)
    max_retries: int = 3
    max_backoff_s: float = 10.0
    signatures: tuple[Signature, ...] = CATALOG
    compare_tokens: int = 0  # > 0 ([verify] on): each answer's first tokens and logprobs are kept as evidence
    replicas: tuple[str, ...] = ()  # more replicas' URLs beside base_url ([target] replicas)
    routing: Routing = "round_robin"  # how requests are spread over base_url and the replicas
    fresh_connections: bool = False  # every request on a new connection, closed after its answer

    def replica_of(self, request_id: int, conversation: int) -> int:
        """The replica a request goes to: 0 is base_url. The same request always goes to the same one (a retry,
        a resend), and with session routing every turn of a conversation."""
        count = 1 + len(self.replicas)
        return (conversation if self.routing == "session" else request_id) % count

    @property
    def spreads_conversations(self) -> bool:
        """Whether the turns of one conversation may go to different replicas."""
        return bool(self.replicas) and self.routing != "session"

    def alone(self) -> ClientConfig:
        """The same client for base_url only: what loadrepro sends outside the load (canaries, oversize
        requests) goes to the target, whose death those judge."""
        return dataclasses.replace(self, replicas=())


class Client:
    """Sends PlannedRequests; one instance per run, used by many tasks at once."""

    def __init__(self, config: ClientConfig, clock: Callable[[], int] = time.perf_counter_ns,
                 activity: Progress | None = None) -> None:
        self.config = config
        self._clock = clock
        self.activity: Progress = activity or Activity()
        # Each replica's own progress (the target's is `activity`, which its death is judged by): a request waiting
        # on one replica is not kept alive by another's tokens, nor a dead target by a live replica's.
        self._progress: list[Progress] = [self.activity, *(Activity() for _ in config.replicas)]
        self._path = PATHS[config.api]
        self._read = READERS[config.api]
        # No read timeout of aiohttp's: silence is judged by _Watchdog, which knows waiting from hanging.
        self._transports = [Transport(url, config.api_key, limit=config.concurrency + 8, timeout_s=None,
                                      fresh_connections=config.fresh_connections)
                            for url in (config.base_url, *config.replicas)]

    async def __aenter__(self) -> Client:
        async with contextlib.AsyncExitStack() as stack:
            for transport in self._transports:
                await stack.enter_async_context(transport)
            self._opened = stack.pop_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._opened.aclose()

    async def send(self, request_id: int, planned: PlannedRequest, queued_ns: int, wall_time: float,
                   on_record: Callable[[RequestRecord], None], cancel_after_chunks: int | None = None,
                   text_out: list[str] | None = None, began: Callable[[], None] | None = None) -> RequestRecord:
        """Send with retries; `on_record` gets the record exactly once, also when the task is cancelled.
        `text_out` gets the whole content of an answer that completed (a live history's next turn holds it);
        `began` is told when the answer's first token arrives."""
        body = planned.payload()
        content, streamed = orjson.dumps(wire_body(self.config.api, body, self.config.model)), body.get("stream", False)
        retries = reconnects = 0
        replica = self.config.replica_of(request_id, planned.conversation)
        structured = asked(body)  # its whole answer is kept, to be checked
        kept = text_out is not None or structured is not None
        while True:
            attempt = Attempt(answer=AnswerParts(self.config.compare_tokens, None if kept else ANSWER_CHARS)
                              if self.config.compare_tokens or kept else None, began=began, replica=replica)
            try:
                outcome, detail = await self._attempt(self._transports[replica], content, streamed, attempt,
                                                      cancel_after_chunks, planned.headers)
            except asyncio.CancelledError:
                on_record(self._record(request_id, planned, queued_ns, wall_time, attempt, Outcome.CANCELLED,
                                       "cancelled by loadrepro", retries, reconnects + attempt.reconnects, streamed))
                raise
            reconnects += attempt.reconnects
            if outcome is not Outcome.THROTTLED or retries >= self.config.max_retries:
                break
            retries += 1
            delay = attempt.retry_after_s if attempt.retry_after_s is not None else 0.5 * 2 ** retries
            try:
                await asyncio.sleep(min(delay, self.config.max_backoff_s))
            except asyncio.CancelledError:
                on_record(self._record(request_id, planned, queued_ns, wall_time, attempt, outcome, detail, retries,
                                       reconnects, streamed))
                raise
        record = self._record(request_id, planned, queued_ns, wall_time, attempt, outcome, detail, retries,
                              reconnects, streamed)
        if structured is not None and outcome is Outcome.OK and attempt.answer is not None:
            record = dataclasses.replace(record, structured=structured,
                                         unparsed=mismatch(body, attempt.answer.whole(), record.finish_reason,
                                                           attempt.answer.tool_call()))
        elif structured is not None and outcome is Outcome.REJECTED:  # refused what it asked for, not its size
            record = dataclasses.replace(record, structured=structured)
        if text_out is not None and attempt.answer is not None and outcome is Outcome.OK:
            text_out.append(attempt.answer.whole())
        on_record(record)
        return record

    async def _attempt(self, transport: Transport, content: bytes, streamed: bool, a: Attempt,
                       cancel_after_chunks: int | None, headers: tuple[tuple[str, str], ...] = ()
                       ) -> tuple[Outcome, str]:
        """One attempt (the transport may have sent it twice, see load/transport.py)."""
        deadline = asyncio.timeout(self.config.request_timeout_s)
        try:
            async with deadline:
                async with asyncio.timeout(None) as silence:
                    # A whole answer's silence is its being made: request_timeout_s alone judges it.
                    watchdog = _Watchdog(self, a, silence) if streamed else None
                    try:
                        a.sent_ns = a.last_byte_ns = self._clock()
                        sent = {**_JSON, **dict(headers)} if headers else _JSON
                        async with transport.open("POST", self._path, content, sent, trace=a) as response:
                            a.first_byte_ns = a.last_byte_ns = self._clock()
                            a.status = response.status
                            if response.status != 200:
                                return await self._refused(response, a)
                            if streamed and response.content_type == "text/event-stream":
                                return await self._read_stream(response, a, cancel_after_chunks)
                            return await self._read_whole(response, a)
                    finally:
                        if watchdog is not None:
                            watchdog.cancel()
        except TARGET_FAULTS as exc:  # what the target or the network did; loadrepro's own bugs propagate
            if a.silence is not None:
                return self._silence_outcome(a)
            if deadline.expired():
                return Outcome.TIMEOUT, "the request exceeded request_timeout_s"
            return outcome_for_exception(exc, a.status is not None)

    def _silence_outcome(self, a: Attempt) -> tuple[Outcome, str]:
        stall = self.config.stall_timeout_s
        if a.silence == "ttft":
            return Outcome.TIMEOUT, f"no first token within ttft_timeout_s ({self.config.ttft_timeout_s:g} s)"
        if a.first_token_ns is not None:
            return Outcome.STALLED, f"no byte on the stream for {stall:g} s after its first token"
        # What loadrepro saw, not what the engine did: an engine can be busy with work that is not loadrepro's
        # (requests whose clients left), which the stall rule's words then name (judge/waits.py).
        return Outcome.STALLED, (f"no first token, and no progress seen anywhere on the engine (no token on any of "
                                 f"loadrepro's streams, no metric it reads moving) for {stall:g} s")

    async def _refused(self, response: aiohttp.ClientResponse, a: Attempt) -> tuple[Outcome, str]:
        if (location := off_origin(response)) is not None:  # not an OpenAI answer: the load went nowhere
            return Outcome.PROTOCOL_ERROR, f"HTTP {response.status} {redirected(location)}"
        text = (await response.content.read(DETAIL_LIMIT)).decode("utf-8", "replace")
        a.retry_after_s = retry_after(response.headers)
        outcome = outcome_for_status(response.status, text, a.retry_after_s is not None, self.config.signatures)
        return outcome, text or f"HTTP {response.status}"

    async def _read_stream(self, response: aiohttp.ClientResponse, a: Attempt,
                           cancel_after_chunks: int | None) -> tuple[Outcome, str]:
        events = SseStream()
        stop = False
        yielded = a.last_byte_ns or 0
        # Whole received chunks, split into lines here: aiohttp's own line reader rescans its buffer per line,
        # which goes quadratic when a fast engine fills it faster than it is read.
        async for chunk in response.content.iter_any():
            now = a.last_byte_ns = self._clock()
            for data in events.feed(chunk):
                if self._event(data, a, cancel_after_chunks):
                    stop = True
                    break
            if stop:
                break
            # A stream whose bytes are always already there never waits, so it lets the watchers and the other
            # streams run now and then; yielding after every chunk cost a loop turn per token.
            if now - yielded > _YIELD_EVERY_NS:
                await asyncio.sleep(0)
                yielded = self._clock()
        else:
            for data in events.flush():
                self._event(data, a, cancel_after_chunks)
        if cancel_after_chunks is not None and len(a.chunk_ns) >= cancel_after_chunks and not a.done:
            return Outcome.CANCELLED, f"cancelled by loadrepro after {len(a.chunk_ns)} chunks"
        return self._stream_outcome(a)

    def _event(self, data: bytes, a: Attempt, cancel_after_chunks: int | None) -> bool:
        """Take in one SSE event; True when reading should stop."""
        now = self._clock()
        if data == b"[DONE]":
            a.done = True
            return True
        payload = orjson.loads(data)
        if not isinstance(payload, dict):
            raise ProtocolViolation(f"an SSE event that is not a JSON object: {data[:200]!r}")
        error = error_of(payload)
        if error is not None:
            a.error, a.error_code = error[0][:DETAIL_LIMIT], error[1]
            return False
        seen = self._read(payload, a)
        if seen:
            if a.first_content_ns is None:  # after the first content token, no token is a first one
                a.first_token(now)
                if seen == CONTENT:
                    a.first_content_ns = now
            a.chunk_ns.append(now)
            self._progress[a.replica].last_ns = now
        return a.done or (cancel_after_chunks is not None and len(a.chunk_ns) >= cancel_after_chunks)

    def _stream_outcome(self, a: Attempt) -> tuple[Outcome, str]:
        if a.error is not None:
            return outcome_for_stream_error(a.error, a.error_code, self.config.signatures), a.error
        reason = a.finish_reason
        if isinstance(reason, dict):  # SGLang reports aborts as {"type": "abort", "message": ...}
            if reason.get("type") == "abort":
                return Outcome.STREAM_ERROR, str(reason.get("message", "aborted by the engine"))
            a.finish_reason = str(reason.get("type"))
        if a.finish_reason is None:
            return Outcome.TRUNCATED, "the stream ended before a finish reason"
        return Outcome.OK, "" if a.done else f"the stream ended without {END_MARKS[self.config.api]}"

    async def _read_whole(self, response: aiohttp.ClientResponse, a: Attempt) -> tuple[Outcome, str]:
        payload = orjson.loads(await response.read())
        error = error_of(payload)
        if error is not None:
            a.error, a.error_code = error[0][:DETAIL_LIMIT], error[1]
            return self._stream_outcome(a)
        if not isinstance(payload, dict):
            raise ProtocolViolation(f"a response that is not a JSON object: {str(payload)[:200]!r}")
        whole_answer(self.config.api, payload, a)
        self._progress[a.replica].last_ns = self._clock()  # it made progress; when its tokens came, no one can tell
        return self._stream_outcome(a)

    def unsent(self, request_id: int, planned: PlannedRequest, queued_ns: int, wall_time: float) -> RequestRecord:
        """The record of a request cancelled while it waited for a free slot."""
        replica = self.config.replica_of(request_id, planned.conversation)
        return self._record(request_id, planned, queued_ns, wall_time, Attempt(replica=replica), Outcome.CANCELLED,
                            "cancelled by loadrepro before it was sent", 0)

    def _record(self, request_id: int, planned: PlannedRequest, queued_ns: int, wall_time: float, a: Attempt,
                outcome: Outcome, detail: str, retries: int, reconnects: int = 0,
                streamed: bool | None = None) -> RequestRecord:
        """`streamed`: whether its body asked for a stream (None: as planned, for one never sent)."""
        usage = a.usage or {}
        details = usage.get("prompt_tokens_details")
        details = details if isinstance(details, dict) else {}
        signature = match(detail, self.config.signatures) if detail and outcome is not Outcome.OK else None
        return RequestRecord(
            id=request_id, conversation=planned.conversation, turn=planned.turn, outcome=outcome,
            detail=detail[:DETAIL_LIMIT], status=a.status, wall_time=wall_time, queued_ns=queued_ns,
            sent_ns=a.sent_ns, first_byte_ns=a.first_byte_ns, first_token_ns=a.first_token_ns, end_ns=self._clock(),
            first_content_ns=a.first_content_ns,
            chunk_ns=tuple(a.chunk_ns), finish_reason=a.finish_reason if isinstance(a.finish_reason, str) else None,
            prompt_tokens=count_of(usage.get("prompt_tokens")),
            completion_tokens=count_of(usage.get("completion_tokens")),
            cached_tokens=count_of(details.get("cached_tokens")),
            expected_prompt_tokens=planned.expected_prompt_tokens,
            shared_prefix_tokens=planned.shared_prefix_tokens, max_tokens=planned.max_tokens, retries=retries,
            signature=signature.name if signature else None,
            signature_class=signature.klass.value if signature else None, reconnects=reconnects,
            answer=a.answer.done() if a.answer is not None and outcome is Outcome.OK and self.config.compare_tokens
            else None, streamed=planned.stream if streamed is None else streamed,
            replica=a.replica, draft_tokens=count_of(a.timings.get("draft_n")),
            draft_accepted=count_of(a.timings.get("draft_n_accepted")), own_prefix_tokens=planned.own_prefix_tokens)



class _Watchdog:
    """Ends a request that is silent too long, by expiring its `silence` timeout: after the first token, no byte
    on the stream for stall_timeout_s; before it, no progress anywhere for stall_timeout_s (a hang, or capacity
    held elsewhere), or the ttft_timeout_s. Checks only when a limit could have passed, so a request costs a timer,
    not a poll."""

    __slots__ = ("_client", "_a", "_silence", "_loop", "_handle", "_ttft_ns")

    def __init__(self, client: Client, a: Attempt, silence: asyncio.Timeout) -> None:
        self._client, self._a, self._silence = client, a, silence
        self._loop = asyncio.get_running_loop()
        ttft = client.config.ttft_timeout_s
        self._ttft_ns = client._clock() + int(ttft * 1e9) if ttft > 0 else None
        self._handle: asyncio.Handle = self._loop.call_later(min(client.config.stall_timeout_s, ttft or float("inf")),
                                                             self._check)

    def _check(self, confirm: int = 2) -> None:
        """Expires the request once its limit passed, confirmed `confirm` turns of the event loop later: when the
        loop itself was held up (a busy machine, a long collection), this timer and the bytes that came meanwhile
        are due at once, and the readers run in the turns after it; judged before them, a request still receiving
        would be read as stalled."""
        a, client = self._a, self._client
        now, stall_ns = client._clock(), int(client.config.stall_timeout_s * 1e9)
        if a.first_token_ns is not None:
            due = a.last_byte_ns + stall_ns
            reason = "stalled"
        else:
            # Any byte on its own stream (an SSE comment a gateway sends while it queues) also says it is alive.
            due = max(a.sent_ns or now, a.last_byte_ns, client._progress[a.replica].last_ns) + stall_ns
            reason = "stalled"
            if self._ttft_ns is not None and self._ttft_ns < due:
                due, reason = self._ttft_ns, "ttft"
        if now >= due and confirm:
            self._handle = self._loop.call_soon(self._check, confirm - 1)
            return
        if now >= due:
            a.silence = reason
            self._silence.reschedule(self._loop.time())
            return
        self._handle = self._loop.call_later((due - now) / 1e9, self._check)

    def cancel(self) -> None:
        self._handle.cancel()
