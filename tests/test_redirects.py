"""A target that redirects: followed within its origin (scheme, host, port), never to another one. A load aimed at
an isolated engine must not move to another host unnoticed, and nothing (the key, prompts, token counting) leaves
the target's origin."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable

from aiohttp import web

from loadrepro.load.engine import _NO_PROXY
from loadrepro.load.transport import Transport
from tests.helpers import cli, small
from tests.stub_server import StubServer, chat_app, serving

KEY = "sk-RedirectTestKey"


def front(stub: StubServer, location: Callable[[str], str], keys: list[str]) -> web.Application:
    """/health and /v1/models answered here; chat completions answered 307 to `location(path)`, and served under
    /moved/ by `stub` (recording the Authorization each carried)."""
    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(location(request.path))

    async def served(request: web.Request) -> web.StreamResponse:
        keys.append(request.headers.get("authorization", ""))
        return await stub.generate(request)

    return chat_app("stub", moved, web.post("/moved/v1/chat/completions", served), models=stub.models)


def run(url: str, tmp_path, tokenizer_dir) -> tuple[int, dict, list[dict]]:
    done = cli("run", "--base-url", url, "--tokenizer", str(tokenizer_dir), "--out", str(tmp_path / "run"), "--quiet",
               *small(), env={"OPENAI_API_KEY": KEY})
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    return done.returncode, report, records


def test_a_redirect_to_another_origin_is_not_followed_and_names_where(tmp_path, tokenizer_dir):
    elsewhere = StubServer()
    with elsewhere.running(host="127.0.0.2"):
        keys: list[str] = []
        with serving(front(StubServer(), lambda path: elsewhere.url + path, keys)) as url:
            code, report, records = run(url, tmp_path, tokenizer_dir)
    assert elsewhere.stats.requests == 0 and elsewhere.stats.health_polls == 0  # nothing went there
    assert code == 1 and report["verdict"] == "fail"
    assert report["requests"]["by_outcome"] == {"protocol_error": len(records)}
    location = f"{elsewhere.url}/v1/chat/completions"
    assert all(location in r["detail"] and "307" in r["detail"] for r in records)
    assert location in report["first_failure"]["detail"]


def test_a_redirect_within_the_origin_is_followed_with_the_key(tmp_path, tokenizer_dir):
    stub, keys = StubServer(), []
    with serving(front(stub, lambda path: "/moved" + path, keys)) as url:
        code, report, records = run(url, tmp_path, tokenizer_dir)
    assert code == 0 and report["verdict"] == "pass", report["reasons"]
    assert report["requests"]["by_outcome"] == {"ok": len(records)} and stub.stats.requests == len(records)
    assert keys and set(keys) == {f"Bearer {KEY}"}


def test_health_and_token_counting_stay_on_the_origin():
    """What the watchers and the counting send (Transport.fetch) and the managed engine's startup poll (urllib)."""
    elsewhere = StubServer()

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPPermanentRedirect(elsewhere.url + request.path)

    async def fetched(url: str) -> tuple[int, str, int, str]:
        async with Transport(url, api_key=KEY) as transport:
            health = await transport.get("/health")
            counted = await transport.fetch("POST", "/tokenize", {"content": "x"})
        assert not isinstance(health, Exception) and not isinstance(counted, Exception)
        return health.status, health.text, counted.status, counted.text  # type: ignore[union-attr]

    app = web.Application()
    app.add_routes([web.get("/health", moved), web.post("/tokenize", moved)])
    with elsewhere.running(host="127.0.0.2"), serving(app) as url:
        health, said, counted, counted_said = asyncio.run(fetched(url))
        request = urllib.request.Request(url + "/health", headers={"authorization": f"Bearer {KEY}"})
        try:
            _NO_PROXY.open(request, timeout=5).close()
            polled = 200
        except urllib.error.HTTPError as error:
            polled = error.code
    assert (health, counted, polled) == (308, 308, 308)
    assert elsewhere.url + "/health" in said and elsewhere.url + "/tokenize" in counted_said
    assert elsewhere.stats.health_polls == 0 and elsewhere.stats.requests == 0
