"""An authenticating gateway in front of an engine, for tests: every path wants `Authorization: Bearer KEY` (a
refusal is LiteLLM's 401 body), requests are forwarded to the upstream as they stream, and an upstream that cannot
be reached is answered the way LiteLLM answers it (HTTP 500, "...OpenAIException - Connection error."), while the
gateway's own /health keeps answering 200, as gateways' health paths do.

`kill_upstream_after`: after that many forwarded generation requests have finished, the gateway calls `on_kill`
(the test kills the engine behind it, by PID).

`litellm`: it also answers as LiteLLM's proxy does: GET /health/readiness (no key) with its `litellm_version`,
GET /health/liveliness (no key) with "I'm alive!", and its /health calls the model behind it on every poll (a
one-token generation sent upstream, counted in `health_model_calls`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import aiohttp
from aiohttp import web

from tests.stub_server import serving

UPSTREAM_DOWN = ("litellm.InternalServerError: InternalServerError: OpenAIException - Connection error.\n\nLiteLLM: "
                 "model group 'tiny' failed with the error above. No fallback was attempted.")


class Gateway:
    def __init__(self, upstream: str, key: str, kill_upstream_after: int | None = None,
                 on_kill: Callable[[], None] | None = None, throttle_after: int | None = None,
                 litellm: bool = False) -> None:
        """`throttle_after`: after that many generation requests, every one is refused with nginx's 503 page and
        Retry-After (a proxy's rate limit), the engine behind it healthy and idle."""
        self.upstream, self.key = upstream.rstrip("/"), key
        self.kill_upstream_after, self.on_kill = kill_upstream_after, on_kill
        self.throttle_after = throttle_after
        self.litellm = litellm
        self.health_model_calls = 0  # generations its /health sent upstream (litellm)
        self.refused = 0  # requests without the key
        self.forwarded = 0  # generation requests that finished
        self.paths: list[str] = []  # every path asked, keyed or not
        self.url = ""
        self._session: aiohttp.ClientSession | None = None

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.key}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.paths.append(request.path)
        if self.litellm and request.path == "/health/readiness":
            return web.json_response({"status": "healthy", "db": "Not connected", "litellm_version": "1.108.7"})
        if self.litellm and request.path == "/health/liveliness":
            return web.json_response("I'm alive!")
        if not self._authorised(request):
            self.refused += 1
            return web.json_response({"error": {"message": "Authentication Error, No api key passed in.",
                                                "type": "auth_error", "param": "None", "code": "401"}}, status=401)
        if request.path == "/health":
            if self.litellm:
                await self._model_call()
            return web.json_response({"status": "healthy"})
        if self.throttle_after is not None and self.forwarded >= self.throttle_after and request.method == "POST" \
                and request.path.startswith("/v1/"):
            page = "<html><head><title>503 Service Temporarily Unavailable</title></head></html>"
            return web.Response(status=503, text=page, content_type="text/html", headers={"Retry-After": "0"})
        try:
            return await self._forward(request)
        except aiohttp.ClientConnectionError:
            return web.json_response({"error": {"message": UPSTREAM_DOWN, "type": "internal_server_error",
                                                "param": None, "code": "500"}}, status=500)
        finally:
            if request.path.startswith("/v1/") and request.method == "POST":
                self._finished()

    def _finished(self) -> None:
        self.forwarded += 1
        if self.kill_upstream_after is not None and self.forwarded == self.kill_upstream_after and self.on_kill:
            self.on_kill()

    async def _model_call(self) -> None:
        """What LiteLLM's /health does: a small generation to every model behind it."""
        assert self._session is not None
        self.health_model_calls += 1
        body = {"model": "loadrepro-sim", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
        with contextlib.suppress(aiohttp.ClientError):
            async with self._session.post(self.upstream + "/v1/chat/completions", json=body) as upstream:
                await upstream.read()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        async with self._session.request(request.method, self.upstream + request.path_qs, data=body or None,
                                         headers=headers) as upstream:
            response = web.StreamResponse(status=upstream.status,
                                          headers={"content-type": upstream.headers.get("content-type", "")})
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def _open(self, app: web.Application) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))

    async def _close(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[Gateway]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        with serving(app) as self.url:
            yield self
