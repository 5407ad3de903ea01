"""A purpose-built misbehaving OpenAI-compatible server for client and runner tests, on a loopback port.

Each StubServer has one behaviour for its completions endpoints and counts, server-side, what it saw: requests,
the most in flight at once, and client disconnects. One server per test process serves every StubServer: each
is mounted under a path of its own (`/s/<key>`, its URL), so a request's path chooses the behaviour and the state
that answer it, and a test starts no server of its own. A stub on another loopback address (another origin) gets
a server of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from aiohttp import web

BEHAVIOURS = ("ok", "reject_followups", "reset", "hang", "hang_headers", "malformed", "error_event", "throttle",
              "no_finish", "server_error", "fatal_400", "reject_400", "plain_json", "health_flip", "nonstream", "queue",
              "deadlock", "odd_framing", "pings", "always_sse",
              "reasoning", "tool_calls", "coded_error")


@dataclass
class Stats:
    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    disconnects: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)  # told of every disconnect
    health_polls: int = 0
    bodies: list[dict] = field(default_factory=list)
    first_token_sent_ns: list[int] = field(default_factory=list)  # per stream, perf_counter_ns before the write
    first_content_sent_ns: list[int] = field(default_factory=list)


def wait_until(stats: Stats, done: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Whether `done()` came true within `timeout_s`, checked at each disconnect the server sees: a test waits on
    what the server saw, not for a while."""
    with stats.changed:
        return stats.changed.wait_for(done, timeout_s)


def _chunk(text: str | None, finish: str | None = None) -> bytes:
    delta = {"content": text} if text is not None else {}
    payload = {"id": "x", "object": "chat.completion.chunk", "model": "stub",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(payload)}\n\n".encode()


def _delta(delta: dict, finish: str | None = None) -> bytes:
    payload = {"id": "x", "object": "chat.completion.chunk", "model": "stub",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(payload)}\n\n".encode()


def _usage(prompt: int, completion: int) -> bytes:
    payload = {"id": "x", "object": "chat.completion.chunk", "model": "stub", "choices": [],
               "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                         "prompt_tokens_details": {"cached_tokens": prompt // 2}}}
    return f"data: {json.dumps(payload)}\n\n".encode()


class StubServer:
    def __init__(self, behaviour: str = "ok", tokens: int = 8, token_delay_s: float = 0.0,
                 first_token_delay_s: float = 0.0, flip_after_polls: int = 2, ttft_growth_per_s: float = 0.0,
                 kv_leak_per_request: float | None = None, reasoning_field: str = "reasoning_content",
                 reasoning_s: float = 1.0, error_code: object = "429", health_delay_s: float = 0.0,
                 busy_health_delay_s: float | None = None, die_after: int | None = None,
                 wedge_after: int | None = None, max_model_len: int | None = None,
                 slow: tuple[float, int, float] | None = None) -> None:
        """`ttft_growth_per_s`: a streamed request waits this much longer for its first token per second since the
        first streamed request (token-count probes are not streamed).
        `slow` (after_s, count, by_s): the first `count` streams started `after_s` or more after the first stream wait
        `by_s` longer for their first token (a hiccup: a few slow requests, then on as before).
        `kv_leak_per_request`: serve vLLM-style /metrics whose KV usage keeps this share per finished request,
        freed never (a leak), besides 5% per running request."""
        assert behaviour in BEHAVIOURS, behaviour
        self.behaviour, self.tokens = behaviour, tokens
        # "reasoning": reasoning deltas in `reasoning_field` for `reasoning_s` before the content (vLLM's
        # reasoning_content, or its newer `reasoning`); "tool_calls": a tool call streamed as argument fragments.
        self.reasoning_field, self.reasoning_s = reasoning_field, reasoning_s
        self.error_code = error_code  # "coded_error": an error object in the stream with this code (a gateway's "429")
        # /health takes `health_delay_s` to answer, or `busy_health_delay_s` while generation requests are in flight;
        # after `die_after` finished streams the engine is dead: /health 503 (as slowly), every request a 500.
        self.health_delay_s, self.busy_health_delay_s, self.die_after = health_delay_s, busy_health_delay_s, die_after
        # After `wedge_after` finished streams, streams get their headers and then nothing, ever; /health stays 200.
        self.wedge_after = wedge_after
        # Published in /v1/models (as vLLM does); a prompt of more words than that is refused with a 400.
        self.max_model_len = max_model_len
        self.last_token_sent_ns = 0
        self.ttft_growth_per_s, self.kv_leak_per_request = ttft_growth_per_s, kv_leak_per_request
        self._first_stream_at: float | None = None
        self.slow, self.slowed = slow, 0
        self.finished = 0
        self.token_delay_s, self.first_token_delay_s = token_delay_s, first_token_delay_s
        self.flip_after_polls = flip_after_polls
        self.stats = Stats()
        self.url = ""
        self._turn: asyncio.Lock | None = None  # "queue": one stream at a time, the others wait with headers sent

    @property
    def flipped(self) -> bool:
        dead = self.die_after is not None and self.finished >= self.die_after
        return dead or self.behaviour == "health_flip" and self.stats.health_polls > self.flip_after_polls

    async def health(self, request: web.Request) -> web.Response:
        self.stats.health_polls += 1
        busy = self.busy_health_delay_s is not None and self.stats.in_flight > 0
        await asyncio.sleep(self.busy_health_delay_s if busy else self.health_delay_s)
        return web.Response(status=503 if self.flipped else 200)

    async def models(self, request: web.Request) -> web.Response:
        model: dict = {"id": "stub", "object": "model"}
        if self.max_model_len:
            model["max_model_len"] = self.max_model_len
        return web.json_response({"object": "list", "data": [model]})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.stats.requests += 1
        self.stats.bodies.append(body)
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            return await self._respond(request, body)
        except (asyncio.CancelledError, ConnectionResetError):
            with self.stats.changed:
                self.stats.disconnects += 1
                self.stats.changed.notify_all()
            raise
        finally:
            self.stats.in_flight -= 1

    async def _respond(self, request: web.Request, body: dict) -> web.StreamResponse:
        b = self.behaviour
        words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        if self.max_model_len and words > self.max_model_len:
            return web.json_response({"object": "error", "code": 400, "message": f"This model's maximum context "
                                      f"length is {self.max_model_len} tokens; the prompt has {words}"}, status=400)
        if b == "throttle":
            return web.json_response({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "0"})
        if b == "server_error" or self.flipped:
            return web.json_response({"error": {"message": "EngineCore encountered an issue"}}, status=500)
        if b == "fatal_400":
            return web.json_response({"object": "error", "message": "Available blocks exhausted", "code": 400},
                                     status=400)
        if b == "reject_followups" and len(body.get("messages", [])) > 2:
            return web.json_response({"error": {"message": "This model's maximum context length is 2048 tokens. "
                                                "However, your prompt contains at least 2049 input tokens"}},
                                     status=400)
        if b == "reject_400":
            return web.json_response({"error": {"message": "This model's maximum context length is 10 tokens."}},
                                     status=400)
        if b == "hang_headers":
            await asyncio.sleep(3600)
        if b == "plain_json" or b == "nonstream" or (not body.get("stream") and b != "always_sse"):
            await asyncio.sleep(self.first_token_delay_s)  # a whole answer comes when its last token is made
            return web.json_response({"id": "x", "object": "chat.completion", "model": "stub",
                                      "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                                   "finish_reason": "stop"}],
                                      "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        if b == "malformed":
            await response.write(b"data: {not json\n\n")
            return response
        if b == "error_event":
            await response.write(_chunk(" one"))
            await response.write(b'data: {"error": {"message": "Failed to resume draft KV cache for request 3"}}\n\n')
            await response.write(b"data: [DONE]\n\n")
            return response
        if b == "pings":  # a gateway that keeps a queued stream alive with SSE comments before its first token
            for _ in range(6):
                await response.write(b": ping\n\n")
                await asyncio.sleep(0.2)
        if b == "odd_framing":
            return await self._odd_framing(response)
        if b == "reasoning":
            return await self._reasoning(response)
        if b == "coded_error":
            await response.write(_chunk(" one"))
            error = {"error": {"message": "upstream said no", "type": "upstream_error", "code": self.error_code}}
            await response.write(f"data: {json.dumps(error)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            return response
        if b == "tool_calls":
            return await self._tool_calls(response)
        if b == "queue":
            self._turn = self._turn or asyncio.Lock()
            async with self._turn:
                return await self._tokens(request, response, b)
        if self.wedge_after is not None and self.finished >= self.wedge_after:
            await asyncio.sleep(3600)
        if b == "deadlock" and self.stats.requests > 1:
            await asyncio.sleep(3600)  # waits behind the first, which never finishes: nothing progresses
        return await self._tokens(request, response, "hang" if b == "deadlock" else b)

    async def metrics(self, request: web.Request) -> web.Response:
        leaked = min(1.0, (self.kv_leak_per_request or 0.0) * self.finished)
        usage = min(1.0, leaked + 0.05 * self.stats.in_flight)
        return web.Response(text=f"vllm:kv_cache_usage_perc {usage}\nvllm:num_requests_running "
                                 f"{self.stats.in_flight}\nvllm:num_requests_waiting 0\n")

    async def _tokens(self, request: web.Request, response: web.StreamResponse, b: str) -> web.StreamResponse:
        now = asyncio.get_running_loop().time()
        self._first_stream_at = self._first_stream_at or now
        since = now - self._first_stream_at
        hiccup = self.slow is not None and since >= self.slow[0] and self.slowed < self.slow[1]
        self.slowed += hiccup
        await asyncio.sleep(self.first_token_delay_s + self.ttft_growth_per_s * since + (self.slow[2] if hiccup else 0))
        for i in range(self.tokens):
            if i:
                await asyncio.sleep(self.token_delay_s)
            await response.write(_chunk(f" t{i}"))
            self.last_token_sent_ns = time.perf_counter_ns()
            if b == "reset" and i == 1:
                request.transport.abort()
                return response
            if b == "hang" and i == 1:
                await asyncio.sleep(3600)
        if b != "no_finish":
            await response.write(_chunk(None, "length"))
            await response.write(_usage(100, self.tokens))
        await response.write(b"data: [DONE]\n\n")
        self.finished += 1
        return response

    async def _odd_framing(self, response: web.StreamResponse) -> web.StreamResponse:
        """Legal SSE that OpenAI-compatible servers rarely send: CR and CRLF line ends, comments, event/id/retry
        fields, `data:` without a space, an event's data over two lines, and writes that split lines and CRLFs."""
        first = json.dumps({"choices": [{"index": 0, "delta": {"content": " a"}, "finish_reason": None}]})
        parts = [b": keep-alive\r\r", b"retry: 1000\r\nid: 1\r\nevent: message\r\ndata:", first.encode(),
                 b"\r", b"\n\r\n", b'data: {"choices": [{"index": 0,\ndata: "delta": {"content": " b"}, ',
                 b'"finish_reason": null}]}\n\n', _chunk(None, "length").replace(b"\n", b"\r"),
                 _usage(100, 2).replace(b"\n\n", b"\r\n\r\n"), b"data:[DONE]\r", b"\n\r\n"]
        for part in parts:
            await response.write(part)
            await asyncio.sleep(0.01)  # separate reads on the client side
        return response

    async def _reasoning(self, response: web.StreamResponse) -> web.StreamResponse:
        """A reasoning model: a role chunk, reasoning deltas for `reasoning_s`, then content, then the finish."""
        await response.write(_delta({"role": "assistant", "content": ""}))
        self.stats.first_token_sent_ns.append(time.perf_counter_ns())
        steps = max(1, self.tokens)
        for i in range(steps):
            await response.write(_delta({self.reasoning_field: f" thought{i}"}))
            await asyncio.sleep(self.reasoning_s / steps)
        self.stats.first_content_sent_ns.append(time.perf_counter_ns())
        for i in range(self.tokens):
            await response.write(_chunk(f" t{i}"))
        await response.write(_chunk(None, "stop"))
        await response.write(_usage(100, 2 * self.tokens))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def _tool_calls(self, response: web.StreamResponse) -> web.StreamResponse:
        """A tool call as vLLM streams one: id and name first, then argument fragments; finish `tool_calls`."""
        await response.write(_delta({"role": "assistant"}))
        self.stats.first_token_sent_ns.append(time.perf_counter_ns())
        call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": ""}}
        await response.write(_delta({"tool_calls": [call]}))
        for part in ('{"city', '": "Par', 'is"}'):
            await asyncio.sleep(self.token_delay_s)
            await response.write(_delta({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}))
        await response.write(_delta({}, "tool_calls"))
        await response.write(_usage(100, 4))
        await response.write(b"data: [DONE]\n\n")
        return response

    def routes(self) -> dict[tuple[str, str], Callable[[web.Request], Awaitable[web.StreamResponse]]]:
        """What it answers, by method and path."""
        routes = {("GET", "/health"): self.health, ("GET", "/health/liveliness"): self.health,
                  ("GET", "/v1/models"): self.models, ("POST", "/v1/chat/completions"): self.generate,
                  ("POST", "/v1/completions"): self.generate}
        if self.kv_leak_per_request is not None:
            routes["GET", "/metrics"] = self.metrics
        return routes

    @contextlib.contextmanager
    def running(self, host: str = "127.0.0.1") -> Iterator[StubServer]:
        if host != "127.0.0.1":  # another origin: a server of its own
            app = web.Application()
            app.add_routes([web.route(method, path, handler) for (method, path), handler in self.routes().items()])
            with serving(app, host) as self.url:
                yield self
            return
        with SHARED.mounted(self) as self.url:
            yield self


def chat_app(model: str, chat, *extra: web.RouteDef, health=None, models=None, **options) -> web.Application:
    """A test server's OpenAI-shaped surface: /health (200, or what `health` answers), /v1/models listing `model`
    (or what `models` answers), POST /v1/chat/completions answered by `chat`, and the `extra` routes of its own."""
    async def always_200(_: web.Request) -> web.Response:
        return web.Response()

    health = health or always_200

    async def listed(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    app = web.Application(**options)
    app.add_routes([web.get("/health", health), web.get("/v1/models", models or listed),
                    web.post("/v1/chat/completions", chat), *extra])
    return app


def chunk_event(payload: dict, model: str = "stub") -> bytes:
    """One chat-completions chunk event carrying `payload` (choices, usage)."""
    body = {"id": "x", "object": "chat.completion.chunk", "model": model, **payload}
    return f"data: {json.dumps(body)}\n\n".encode()


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Close a test server's own event loop once it has stopped, its leftover handlers cancelled first: a loop left
    open is a ResourceWarning (its self-pipe sockets) whenever the collector meets it, in whichever test runs then."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


@contextlib.contextmanager
def serving(app: web.Application, host: str = "127.0.0.1") -> Iterator[str]:
    """An aiohttp application on an ephemeral port of a loopback address (`host`: 127.0.0.2 is another origin on
    the same machine), on a thread with its own event loop, for the block; yields its URL."""
    loop = asyncio.new_event_loop()
    sock = socket.socket()
    sock.bind((host, 0))
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.SockSite(runner, sock).start())
        started.set()
        loop.run_forever()
        try:
            loop.run_until_complete(runner.cleanup())
        finally:
            close_loop(loop)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        sock.close()


class SharedServer:
    """The one server of a test process for every StubServer: mounted under `/s/<key>`, each answers the requests
    whose path names it; a path no stub is mounted at (one whose block ended) gets 404. Started at the first
    mount, stopped at the session's end (tests/conftest.py)."""

    def __init__(self) -> None:
        self._stubs: dict[str, StubServer] = {}
        self._keys = itertools.count(1)
        self._serving: contextlib.AbstractContextManager[str] | None = None
        self._url = ""
        self._lock = threading.Lock()

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        stub = self._stubs.get(request.match_info["key"])
        handler = stub.routes().get((request.method, "/" + request.match_info["tail"])) if stub else None
        if handler is None:
            raise web.HTTPNotFound()
        return await handler(request)

    @contextlib.contextmanager
    def mounted(self, stub: StubServer) -> Iterator[str]:
        with self._lock:
            if self._serving is None:
                app = web.Application()
                app.add_routes([web.route("*", "/s/{key}/{tail:.*}", self._dispatch)])
                self._serving = serving(app)
                self._url = self._serving.__enter__()
            key = str(next(self._keys))
            self._stubs[key] = stub
        try:
            yield f"{self._url}/s/{key}"
        finally:
            del self._stubs[key]

    def stop(self) -> None:
        with self._lock:
            if self._serving is not None:
                self._serving.__exit__(None, None, None)
                self._serving = None


SHARED = SharedServer()
