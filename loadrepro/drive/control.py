"""The HTTP client of the control plane (health, metrics, models, tokenize): httpx, with stale pooled connections
resent the way the load's client resends them, so that a connection the server closed is never an unhealthy poll.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx
import orjson

from loadrepro.errors import TargetError
from loadrepro.workload.tokens import Answer

# httpcore asks `import sniffio` each time it sets up a lock (once or more per request), and where sniffio is not
# installed each ask scans sys.path again before failing: about 0.15 ms per request, thousands of times when a
# workload's lengths are counted. Recording the absence once makes the same ImportError immediate.
if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
    sys.modules["sniffio"] = None  # type: ignore[assignment]

_STALE = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
_MAX_RESENDS = 4  # each resend drops one closed connection from the pool; more than a few is not staleness


class ResendingTransport(httpx.AsyncHTTPTransport):
    """Resends a request whose connection, taken from the pool, failed before the response: httpcore opens no new
    connection for it (a trace without `connection.connect_tcp`). Control-plane requests have no side effects."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reconnects = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(_MAX_RESENDS):
            opened = False
            outer = request.extensions.get("trace")

            async def trace(name: str, info: dict[str, Any]) -> None:
                nonlocal opened
                opened = opened or name.startswith("connection.connect_tcp")
                if outer is not None:
                    await outer(name, info)

            request.extensions = {**request.extensions, "trace": trace}
            try:
                return await super().handle_async_request(request)
            except _STALE:
                if opened:
                    raise
                self.reconnects += 1
            finally:
                request.extensions = {**request.extensions, "trace": outer} if outer else {
                    k: v for k, v in request.extensions.items() if k != "trace"}
        return await super().handle_async_request(request)


def control_client(base_url: str, timeout: float) -> httpx.AsyncClient:
    """An httpx client for `base_url` whose transport is a ResendingTransport (see `client.transport`)."""
    return httpx.AsyncClient(base_url=base_url, timeout=timeout, transport=ResendingTransport())


def reconnects_of(http: httpx.AsyncClient) -> int:
    transport = http._transport  # noqa: SLF001 - httpx keeps the transport it was given here
    return transport.reconnects if isinstance(transport, ResendingTransport) else 0


async def get_json(http: httpx.AsyncClient, path: str, timeout: Any = httpx.USE_CLIENT_DEFAULT) -> Any:
    """The JSON a GET of `path` answers with status 200, else None (no answer, another status, not JSON)."""
    try:
        response = await http.get(path, timeout=timeout)
        return response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


class CountingPoster:
    """POSTs for counting a workload's lengths (a tokenize endpoint's, or probes'), on aiohttp: thousands of them
    for a workload counted conversation by conversation, each about 0.18 ms of CPU here against 1.35 ms through
    httpx (measured with the benchmark stub's /tokenize). Like ResendingTransport, a request whose pooled
    connection turns out closed before any answer goes again on a new connection."""

    def __init__(self, base_url: str, timeout: float) -> None:
        self._base, self._timeout = base_url.rstrip("/"), aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self.reconnects = 0

    async def __aenter__(self) -> CountingPoster:
        tracing = aiohttp.TraceConfig()
        tracing.on_connection_reuseconn.append(_mark_reused)
        self._session = aiohttp.ClientSession(timeout=self._timeout, trace_configs=[tracing])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def answer(self, path: str, body: dict[str, Any]) -> Answer:
        assert self._session is not None, "use the CountingPoster as an async context manager"
        data = orjson.dumps(body)
        for _ in range(_MAX_RESENDS + 1):
            mark = SimpleNamespace(reused=False)
            try:
                async with self._session.post(self._base + path, data=data, trace_request_ctx=mark,
                                              headers={"content-type": "application/json"}) as response:
                    return Answer(response.status, await response.read(), response.headers.get("content-type", ""))
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if not mark.reused:
                    raise TargetError(f"counting tokens with {path} failed: {exc}") from exc
                self.reconnects += 1
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                raise TargetError(f"counting tokens with {path} failed: {type(exc).__name__} {exc}") from exc
        raise TargetError(f"counting tokens with {path} failed: {_MAX_RESENDS + 1} pooled connections were closed")


async def _mark_reused(session: aiohttp.ClientSession, context: Any, params: Any) -> None:
    context.trace_request_ctx.reused = True
