"""The connections to a target, for everything loadrepro sends it: the load's streams, token counting, health and
metrics polls, model and limit discovery, canaries and the probe. One place owns pooling, the credentials every
request carries, and the one rule for connections that the server had already closed.

The rule: a request whose connection came from the pool and failed before any answer arrived never reached the
engine (servers and proxies close kept-alive connections all the time: uvicorn's keep-alive timeout, cpp-httplib's
per-connection cap, load balancers), so it is sent again at once on a new connection and counted in `reconnects`.
The same failure on a new connection, or after an answer began, is what the target did. aiohttp does not resend a
POST itself (aio-libs/aiohttp#6138).

With `fresh_connections` every request goes on a new connection, closed after its answer (aiohttp's force_close,
which also says `Connection: close`), as clients behind some proxies connect: nothing is pooled, so nothing is
resent.

Redirects are followed only within the target's origin (scheme, host and port): a load aimed at an isolated engine
must not move to another host unnoticed, and nothing (the key, the prompts, token counting) is sent off it. A
redirect elsewhere is handed back to the caller as the answer, and `off_origin` names where it pointed.

aiohttp serves every path: measured in benchmarks/client_overhead.py, httpx (even on the aiohttp transport) cost
about twice a bare aiohttp loop per streamed chunk, and counting through it 1.35 ms of CPU per request against
0.18 ms.
"""

from __future__ import annotations

import base64
import contextlib
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import yarl

from loadrepro.errors import TargetError
from loadrepro.workload.tokens import Answer

# Failures of a connection itself (not a timeout, not a refused connect): on a pooled connection before any
# response byte they mean the server or a proxy had closed it, not that the engine failed.
CONNECTION_FAILURES = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, ConnectionResetError, BrokenPipeError)
_JSON = {"content-type": "application/json"}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HOPS = 10  # aiohttp's own limit on redirects followed


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """Nothing came back: the connection could not be made (`connect`), or broke, or the wait ran out."""

    reason: str
    connect: bool = False


@dataclass(slots=True)
class Trace:
    """What one request met on its way; a caller may pass its own object with these attributes."""

    reused: bool = False  # its connection came from the pool (set by aiohttp's tracing)
    reconnects: int = 0  # times it was sent again because a pooled connection was closed


def _origin(url: yarl.URL) -> tuple[str, str | None, int | None]:
    return url.scheme, url.host, url.port


def _location(response: aiohttp.ClientResponse) -> yarl.URL | None:
    """Where a redirect points, resolved against the request's URL; None for any other answer."""
    location = response.headers.get("location")
    if response.status not in _REDIRECTS or not location:
        return None
    try:
        return response.url.join(yarl.URL(location))
    except ValueError:
        return None


def off_origin(response: aiohttp.ClientResponse) -> str | None:
    """The Location of a redirect that `Transport.open` did not follow (it left the target's origin), else None."""
    location = _location(response)
    return None if location is None else str(location)


def credentials(url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """The URL without `user:password@`, and the Authorization header that every request loadrepro sends to the
    target carries (the load, token counting, health, metrics, models, canaries): the API key as a Bearer token,
    else the URL's credentials as Basic auth. (aiohttp refuses a URL with credentials and an Authorization
    header both, and a gateway that wants a key wants it on every path.)"""
    parts = urllib.parse.urlsplit(url)
    bare = url
    basic = None
    if parts.username is not None or parts.password is not None:
        bare = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
        pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
        basic = "Basic " + base64.b64encode(pair.encode()).decode()
    if api_key:
        return bare, {"authorization": f"Bearer {api_key}"}
    return bare, {"authorization": basic} if basic else {}


async def _mark_reused(session: aiohttp.ClientSession, context: Any, params: Any) -> None:
    context.trace_request_ctx.reused = True


def _tracing() -> aiohttp.TraceConfig:
    tracing = aiohttp.TraceConfig()
    tracing.on_connection_reuseconn.append(_mark_reused)
    return tracing


class Transport:
    """HTTP to one target, as an async context manager. `limit`: connections kept at most; `timeout_s`: the
    default bound on a whole request (streams pass their own, or none); `fresh_connections`: a new connection for
    every request, closed after it."""

    def __init__(self, base_url: str, api_key: str | None = None, limit: int = 16, timeout_s: float | None = 30.0,
                 connect_timeout_s: float = 10.0, fresh_connections: bool = False) -> None:
        url, auth = credentials(base_url, api_key)
        self.base_url = url.rstrip("/")
        self.headers: dict[str, str] = dict(auth)
        self._limit = limit
        self._fresh_connections = fresh_connections
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
        self._pooled: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None  # new connections only, for resending
        self.reconnects = 0
        self.sent = 0  # requests sent, resends included

    async def __aenter__(self) -> Transport:
        self._pooled = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._limit, force_close=self._fresh_connections),
            timeout=self._timeout, auto_decompress=True, trace_configs=[_tracing()])
        self._fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self._limit, force_close=True),
                                            timeout=self._timeout, auto_decompress=True, trace_configs=[_tracing()])
        return self

    async def __aexit__(self, *exc: object) -> None:
        for session in (self._pooled, self._fresh):
            if session is not None:
                await session.close()

    @contextlib.asynccontextmanager
    async def open(self, method: str, path: str, data: bytes | None = None,
                   headers: Mapping[str, str] | None = None, timeout: aiohttp.ClientTimeout | None = None,
                   trace: Any = None) -> AsyncIterator[aiohttp.ClientResponse]:
        """The response once its head has come, released after the block; a stale pooled connection is the one
        resend (see the module's rule). Transport faults propagate as aiohttp's exceptions."""
        assert self._pooled is not None and self._fresh is not None, "use the Transport as an async context manager"
        trace = trace if trace is not None else Trace()
        sent = {**self.headers, **(headers or {})}
        kwargs: dict[str, Any] = {"data": data, "headers": sent, "trace_request_ctx": trace}
        if timeout is not None:
            kwargs["timeout"] = timeout
        url = yarl.URL(self.base_url + path)
        response = await self._send(method, url, kwargs, trace)
        for _ in range(_HOPS):
            location = _location(response)
            if location is None or _origin(location) != _origin(url):
                break
            response.release()
            if response.status == 303:  # "see other": fetched with GET, as every client does
                method, kwargs = "GET", {**kwargs, "data": None}
            response = await self._send(method, location, kwargs, trace)
        try:
            yield response
        finally:
            response.release()

    async def _send(self, method: str, url: yarl.URL, kwargs: dict[str, Any], trace: Any) -> aiohttp.ClientResponse:
        assert self._pooled is not None and self._fresh is not None
        try:
            self.sent += 1
            return await self._pooled.request(method, url, allow_redirects=False, **kwargs)
        except CONNECTION_FAILURES:
            if not trace.reused:
                raise
            self.reconnects += 1
            trace.reconnects += 1
            trace.reused = False
            self.sent += 1
            return await self._fresh.request(method, url, allow_redirects=False, **kwargs)

    async def fetch(self, method: str, path: str, body: Any = None,
                    timeout_s: float | None = None) -> Answer | NoAnswer:
        """A whole answer (JSON `body` sent when given), or what kept it from coming."""
        data = orjson.dumps(body) if body is not None else None
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s or 10.0, 10.0)) \
            if timeout_s is not None else None
        try:
            async with self.open(method, path, data, _JSON if data is not None else None, timeout) as response:
                if (location := off_origin(response)) is not None:
                    return Answer(response.status, redirected(location).encode(), "text/plain")
                return Answer(response.status, await response.read(), response.headers.get("content-type", ""))
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            return NoAnswer(f"{type(exc).__name__}: {exc}", connect=True)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return NoAnswer(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)

    async def get(self, path: str, timeout_s: float | None = None) -> Answer | NoAnswer:
        return await self.fetch("GET", path, None, timeout_s)

    async def answer(self, path: str, body: dict[str, Any]) -> Answer:
        """A workload.tokens.Poster: the answer to a JSON POST, or a TargetError when none came."""
        answered = await self.fetch("POST", path, body)
        if isinstance(answered, NoAnswer):
            raise TargetError(f"counting tokens with {path} failed: {answered.reason}")
        return answered


def redirected(location: str) -> str:
    return f"redirected to {location}, another origin than the target's: not followed"


async def get_json(transport: Transport, path: str, timeout_s: float | None = None) -> Any:
    """The JSON a GET of `path` answers with status 200, else None (no answer, another status, not JSON)."""
    answered = await transport.get(path, timeout_s)
    if isinstance(answered, NoAnswer) or answered.status != 200:
        return None
    try:
        return answered.json()
    except ValueError:
        return None

