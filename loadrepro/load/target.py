"""Which engine a run talks to and how: URL checks, the credentials every request carries, model discovery."""

from __future__ import annotations

import ipaddress
import urllib.parse

from loadrepro.errors import TargetError, TargetUnreachable, UsageError, auth_refusal
from loadrepro.load.transport import NoAnswer, Transport


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
        parsed = urllib.parse.urlsplit(url)
        parsed.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise UsageError(f"--base-url {url!r} is not a URL: {exc}") from exc
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(f"--base-url must be an http:// or https:// URL with a host, got {url!r}")
    if not is_loopback(parsed.hostname) and not target_is_isolated:
        raise UsageError(f"{parsed.hostname} is not a loopback address. These workloads are meant to break engines: "
                         "pass --target-is-isolated to confirm the target is an isolated test engine.")
    return url.rstrip("/")


async def discover_model(client: Transport) -> str:
    """The first model id the target lists at /v1/models."""
    response = await client.get("/v1/models")
    if isinstance(response, NoAnswer):
        raise TargetError(f"cannot list the target's models at /v1/models: {response.reason}")
    if response.status in (401, 403):
        raise auth_refusal("listing its models at /v1/models", response.status, response.text)
    if response.status != 200:
        raise TargetError(f"cannot list the target's models at /v1/models: HTTP {response.status} "
                          f"{response.text[:200]}")
    try:
        return str(response.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise TargetError("the target's /v1/models lists no model; pass --model") from exc


async def check_reachable(client: Transport, health_path: str) -> None:
    """TargetUnreachable, naming the URL and what was tried, when no connection to the target can be made."""
    tried = []
    for path in dict.fromkeys(p for p in (health_path, "/v1/models") if p):
        response = await client.get(path, 10.0)
        if not isinstance(response, NoAnswer) or not response.connect:
            return  # it answered, if badly: what follows says how
        tried.append(f"GET {path}: {response.reason}")
    raise TargetUnreachable(f"the target at {client.base_url} could not be reached ({'; '.join(tried)})")
