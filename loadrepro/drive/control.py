"""The HTTP client of the control plane (health, metrics, models, tokenize): httpx, with stale pooled connections
resent the way the load's client resends them, so that a connection the server closed is never an unhealthy poll.
"""

from __future__ import annotations

from typing import Any

import httpx

from loadrepro.drive.target import credentials

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


def control_client(base_url: str, timeout: float, api_key: str | None = None) -> httpx.AsyncClient:
    """An httpx client for `base_url` whose transport is a ResendingTransport (see `client.transport`), carrying
    the target's credentials (drive.target.credentials)."""
    url, auth = credentials(base_url, api_key)
    return httpx.AsyncClient(base_url=url, timeout=timeout, transport=ResendingTransport(), headers=auth)


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

