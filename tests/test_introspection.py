"""[watch] introspection_path polled beside /health on a connection of its own: an engine whose /slots stops
answering while /health answers 200 and its streams stop (llama.cpp #27388) fails introspection_unresponsive, the
tokens' stop said with it; one whose /slots hangs while its streams go on gets a warning; one whose /slots answers
does not; one whose /health fails too is not this rule's."""

from __future__ import annotations

import asyncio
import json
import tomllib

from aiohttp import web

from tests.helpers import cli, rebuilt_alike, rule, small
from tests.stub_server import StubServer, chat_app, chunk_event, serving

WATCH = ["--set", "watch.introspection_path='/slots'", "--set", "watch.introspection_timeout_s=0.3", "--set",
         "watch.health_interval_s=0.2", "--set", "load.stall_timeout_s=2", "--set", "load.request_timeout_s=4",
         "--set", "watch.metrics_path=''", "--set", "watch.health_timeout_s=0.25"]
HANG_S = 5.0  # a wedged handler's wait: past every timeout of the run, short of the server's shutdown wait


def _engine(wedge_after: int | None, health_dies: bool = False, streams_live: bool = False) -> web.Application:
    """Answers its first `wedge_after` streams, then wedges: streams send nothing and /slots hangs; /health answers
    200 (or, `health_dies`, hangs too). `streams_live`: only /slots hangs, the streams go on (a token every 50 ms)."""
    streams = 0

    def wedged() -> bool:
        return wedge_after is not None and streams > wedge_after

    async def chat(request: web.Request) -> web.StreamResponse:
        nonlocal streams
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
        streams += 1
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        if wedged() and not streams_live:
            await asyncio.sleep(HANG_S)
        for _ in range(body.get("max_completion_tokens") or body.get("max_tokens") or 4):
            if streams_live:
                await asyncio.sleep(0.05)
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                           "finish_reason": None}]}, "s"))
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, "s"))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def slots(_: web.Request) -> web.Response:
        if wedged():
            await asyncio.sleep(HANG_S)
        return web.json_response([{"id": 0, "is_processing": False}])

    async def health(_: web.Request) -> web.Response:
        if wedged() and health_dies:
            await asyncio.sleep(HANG_S)
        return web.Response()

    return chat_app("s", chat, web.get("/slots", slots), health=health)


def _run(tmp_path, app: web.Application) -> dict:
    with serving(app) as url:
        cli("run", "--profile", "healthy", "--base-url", url, *small(), *WATCH, "--out", str(tmp_path), "--quiet")
    return json.loads((tmp_path / "report.json").read_text())


def test_slots_that_stop_answering_while_health_answers_200_fail_the_run(tmp_path):
    report = _run(tmp_path, _engine(wedge_after=3))
    found = rule(report, "introspection_unresponsive")
    assert found["fired"] and found["severity"] == "fail", found
    facts = found["facts"]
    assert facts["unanswered"] >= 2 and facts["health_200"] >= 1 and facts["tokens_meanwhile"] == 0, facts
    assert facts["in_flight"] >= 1
    rebuilt_alike(tmp_path)


def test_slots_that_answer_do_not_fire_it_nor_a_dead_frontend(tmp_path):
    healthy = _run(tmp_path / "healthy", _engine(wedge_after=None))
    assert healthy["verdict"] == "pass" and not rule(healthy, "introspection_unresponsive")["fired"]
    busy = _run(tmp_path / "busy", _engine(wedge_after=3, streams_live=True))  # its scheduler works: a warning
    lagging = rule(busy, "introspection_unresponsive")
    assert busy["verdict"] == "pass" and lagging["fired"] and lagging["severity"] == "info", lagging
    assert lagging["facts"]["tokens_meanwhile"] > 0, lagging
    dead = _run(tmp_path / "dead", _engine(wedge_after=3, health_dies=True))
    assert not rule(dead, "introspection_unresponsive")["fired"]  # /health failed too: the engine's death, not this



def test_auto_polls_slots_where_the_target_serves_llamacpps_and_nothing_elsewhere(tmp_path):
    """`introspection_path = "auto"`: a target whose GET /slots lists its slots is polled there, and the run's
    profile.toml says so; one without it is not polled at all."""
    auto = [flag.replace("'/slots'", "'auto'") for flag in WATCH]
    with serving(_engine(wedge_after=3)) as url:
        cli("run", "--profile", "healthy", "--base-url", url, *small(), *auto, "--out", str(tmp_path / "slots"),
            "--quiet")
    served = json.loads((tmp_path / "slots" / "report.json").read_text())
    assert rule(served, "introspection_unresponsive")["fired"]
    assert tomllib.loads((tmp_path / "slots" / "profile.toml").read_text())["watch"]["introspection_path"] == "/slots"
    with StubServer("ok", tokens=4).running() as stub:
        cli("run", "--profile", "healthy", "--base-url", stub.url, *small(), *auto, "--out", str(tmp_path / "bare"),
            "--quiet")
    assert tomllib.loads((tmp_path / "bare" / "profile.toml").read_text())["watch"]["introspection_path"] == ""
