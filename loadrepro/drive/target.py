"""Which engine a run talks to: URL checks and model discovery."""

from __future__ import annotations

import ipaddress

import httpx

from loadrepro.errors import TargetError, TargetUnreachable, UsageError


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_base_url(url: str, target_is_isolated: bool) -> str:
    """The URL without a trailing slash; refuses non-HTTP URLs, and non-loopback hosts unless isolated."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise UsageError(f"--base-url {url!r} is not a URL: {exc}") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError(f"--base-url must be an http:// or https:// URL with a host, got {url!r}")
    if not is_loopback(parsed.host) and not target_is_isolated:
        raise UsageError(f"{parsed.host} is not a loopback address. These workloads are meant to break engines: "
                         "pass --target-is-isolated to confirm the target is an isolated test engine.")
    return str(parsed).rstrip("/")


async def discover_model(client: httpx.AsyncClient) -> str:
    """The first model id the target lists at /v1/models."""
    try:
        response = await client.get("/v1/models")
        response.raise_for_status()
        models = response.json()["data"]
        return str(models[0]["id"])
    except httpx.HTTPError as exc:
        raise TargetError(f"cannot list the target's models at /v1/models: {exc}") from exc
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise TargetError("the target's /v1/models lists no model; pass --model") from exc


async def check_reachable(client: httpx.AsyncClient, health_path: str) -> None:
    """TargetUnreachable, naming the URL and what was tried, when no connection to the target can be made."""
    tried = []
    for path in dict.fromkeys(p for p in (health_path, "/v1/models") if p):
        try:
            await client.get(path, timeout=10.0)
            return
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            tried.append(f"GET {path}: {type(exc).__name__}: {exc}")
        except httpx.HTTPError:
            return  # it answered, if badly: what follows says how
    url = str(client.base_url).rstrip("/")
    raise TargetUnreachable(f"the target at {url} could not be reached ({'; '.join(tried)})")
