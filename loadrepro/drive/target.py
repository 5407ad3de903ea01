"""Which engine a run talks to and how: URL checks, the credentials every request carries, model discovery."""

from __future__ import annotations

import base64
import ipaddress
import urllib.parse

import httpx

from loadrepro.errors import TargetError, TargetUnreachable, UsageError, auth_refusal


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
        if response.status_code in (401, 403):
            raise auth_refusal("listing its models at /v1/models", response.status_code, response.text)
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
