"""Raw HTTP/1.1 servers that treat kept-alive connections the way real servers and proxies do, for tests.

Written on asyncio streams rather than a web framework, so that every detail of the connection is the test's:
- `close_after_stream`: closes the connection after each streamed answer, although its headers said keep-alive
  (what llama.cpp's cpp-httplib was seen doing);
- `idle_close`: a connection idle for `idle_s` after an answer is closed without a word; a request that arrives on
  it then meets the close (the instant a client picks a pooled connection the server is closing), and idle
  connections are also closed by a timer. As a real keep-alive timeout, it runs between requests: a new connection
  waits for its first (a busy client may take longer than `idle_s` to write it);
- `connection_close`: every answer says `Connection: close`, and the connection is closed;
- `max_requests`: closes a connection after `max_requests` answers without announcing it (nginx
  `keepalive_requests`, cpp-httplib's keep-alive count).
Failures the client must still call failures: `cut_request` cuts that request's stream after two chunks;
`exit_after` ends the whole process (run as `python -m tests.netservers`) after that many streamed answers.

It answers like an OpenAI-compatible engine without a tokenize endpoint: `/health`, `/v1/models`, and chat or
completions, streamed or not, with `usage.prompt_tokens` counted by the simulated engine's tokenizer, so that
lengths calibrate by probes. Every request body is kept in `received` (in arrival order).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from loadrepro.sim.tokenizer import render_chat, tokenize
from tests.stub_server import close_loop

POLICIES = ("keep_alive", "close_after_stream", "idle_close", "connection_close", "max_requests")


@dataclass
class Counters:
    connections: int = 0
    requests: int = 0
    streamed: int = 0
    closed_by_policy: int = 0
    received: list[dict] = field(default_factory=list)
    by_connection: list[list[dict]] = field(default_factory=list)  # each connection's generation requests, in order


def prompt_tokens(body: dict) -> int:
    if "messages" in body:
        return len(tokenize(render_chat(body["messages"])))
    return len(tokenize(str(body.get("prompt", ""))))


class RawServer:
    def __init__(self, policy: str = "keep_alive", idle_s: float = 0.05, max_requests: int = 5,
                 token_delay_s: float = 0.0, cut_request: int | None = None, exit_after: int | None = None,
                 linger_s: float = 0.002) -> None:
        assert policy in POLICIES, policy
        self.policy, self.idle_s, self.max_requests = policy, idle_s, max_requests
        self.token_delay_s, self.cut_request, self.exit_after = token_delay_s, cut_request, exit_after
        self.linger_s = linger_s
        self.counters = Counters()
        self.url = ""

    # -- one connection -----------------------------------------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counters.connections += 1
        served = 0
        bodies: list[dict] = []
        self.counters.by_connection.append(bodies)
        idle_since = time.monotonic()
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._idle_limit(served))
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    self.counters.closed_by_policy += self.policy == "idle_close" and served > 0
                    return
                if self.policy == "idle_close" and served and time.monotonic() - idle_since >= self.idle_s:
                    # The server closed this connection at idle_s; the request crossed the close on the wire.
                    self.counters.closed_by_policy += 1
                    return
                method, path, headers = _parse_head(head)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                served += 1
                keep = await self._answer(writer, method, path, body, served, bodies)
                await writer.drain()
                if not keep:
                    if self.policy in ("close_after_stream", "max_requests"):
                        # Unannounced: the client has its answer and may already have sent the next request here
                        # (a capped connection is held longer, so that it is: the close and a request cross).
                        await asyncio.sleep(self.linger_s if self.policy == "close_after_stream" else 0.05)
                    return
                idle_since = time.monotonic()
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _idle_limit(self, served: int) -> float | None:
        return self.idle_s * 4 if self.policy == "idle_close" and served else None

    async def _answer(self, writer: asyncio.StreamWriter, method: str, path: str, raw: bytes, served: int,
                      bodies: list[dict]) -> bool:
        """Writes the answer; False when the connection is to be closed after it."""
        closing = self.policy == "connection_close"
        if method == "GET" and path == "/health":
            _write_json(writer, 200, {"status": "ok"}, closing)
        elif method == "GET" and path == "/v1/models":
            _write_json(writer, 200, {"object": "list", "data": [{"id": "raw", "object": "model"}]}, closing)
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            body = json.loads(raw)
            self.counters.requests += 1
            self.counters.received.append(body)
            bodies.append(body)
            if body.get("stream"):
                return await self._stream(writer, body, closing) and not self._at_max(served)
            _write_json(writer, 200, _completion(body), closing)
        else:
            _write_json(writer, 404, {"error": {"message": f"no {method} {path} here", "code": 404}}, closing)
        return not closing and not self._at_max(served)

    def _at_max(self, served: int) -> bool:
        if self.policy == "max_requests" and served >= self.max_requests:
            self.counters.closed_by_policy += 1
            return True
        return False

    async def _stream(self, writer: asyncio.StreamWriter, body: dict, closing: bool) -> bool:
        number = self.counters.streamed = self.counters.streamed + 1
        if self.exit_after is not None and number > self.exit_after:
            os._exit(0)  # the engine process dies: no answer, every connection reset
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                     + (b"connection: close\r\n" if closing else b"connection: keep-alive\r\n") + b"\r\n")
        tokens = int(body.get("max_tokens") or 4)
        chat = "messages" in body
        for i in range(tokens):
            if i and self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            _chunk(writer, _event(chat, f" t{i}", None))
            if number == self.cut_request and i == 1:
                await writer.drain()
                writer.transport.abort()
                return False
        _chunk(writer, _event(chat, None, "length"))
        _chunk(writer, b"data: " + json.dumps({"choices": [], "usage": {
            "prompt_tokens": prompt_tokens(body), "completion_tokens": tokens}}).encode() + b"\n\n")
        _chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        if self.policy == "close_after_stream":
            self.counters.closed_by_policy += 1
            return False
        return True

    # -- serving ------------------------------------------------------------------------------------------------

    async def serve(self, sock: socket.socket, started: threading.Event | None = None) -> None:
        server = await asyncio.start_server(self.handle, sock=sock)
        if started is not None:
            started.set()
        async with server:
            await server.serve_forever()

    @contextlib.contextmanager
    def running(self) -> Iterator[RawServer]:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        loop = asyncio.new_event_loop()
        started = threading.Event()
        task: list[asyncio.Task] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            task.append(loop.create_task(self.serve(sock, started)))
            try:
                with contextlib.suppress(asyncio.CancelledError):
                    loop.run_until_complete(task[0])
            finally:
                close_loop(loop)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert started.wait(10)
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(task[0].cancel)
            thread.join(10)
            sock.close()


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return method, path, headers


def _write_json(writer: asyncio.StreamWriter, status: int, payload: dict, closing: bool) -> None:
    body = json.dumps(payload).encode()
    reason = {200: "OK", 404: "Not Found"}.get(status, "Error")
    writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                 f"connection: {'close' if closing else 'keep-alive'}\r\n\r\n".encode() + body)


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _event(chat: bool, text: str | None, finish: str | None) -> bytes:
    choice = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta"] = {"content": text} if text is not None else {}
    else:
        choice["text"] = text or ""
    return b"data: " + json.dumps({"id": "raw", "model": "raw", "choices": [choice]}).encode() + b"\n\n"


def _completion(body: dict) -> dict:
    tokens = int(body.get("max_tokens") or 1)
    message = {"message": {"role": "assistant", "content": "ok"}} if "messages" in body else {"text": "ok"}
    return {"id": "raw", "object": "chat.completion", "model": "raw",
            "choices": [{"index": 0, **message, "finish_reason": "length"}],
            "usage": {"prompt_tokens": prompt_tokens(body), "completion_tokens": tokens}}


def main() -> None:
    """Serve in this process on a free port; prints the URL. For tests whose engine process must die."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", default="keep_alive", choices=POLICIES)
    parser.add_argument("--exit-after", type=int)
    parser.add_argument("--token-delay", type=float, default=0.0)
    args = parser.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog from now on: the URL is printed once it can be connected to
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    server = RawServer(args.policy, exit_after=args.exit_after, token_delay_s=args.token_delay)
    asyncio.run(server.serve(sock))


if __name__ == "__main__":
    sys.exit(main())
