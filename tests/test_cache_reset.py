"""[target] reset_cache: the target's prefix cache emptied before the load, after the counting, and said in the
report: vLLM's and SGLang's reset (the simulated engine serves vLLM's), llama.cpp's slots erased one by one; a target
that offers no reset is a usage error before any load request."""

from __future__ import annotations

import json

from aiohttp import web

from tests.helpers import cli, small
from tests.stub_server import chat_app, serving
from tests.trace_server import TraceServer

RESET = ["--set", "target.reset_cache=true"]


def _notes(run_dir) -> list[str]:
    return json.loads((run_dir / "report.json").read_text())["notes"]


def test_the_simulated_engines_cache_is_reset_before_the_load_and_the_report_says_so(tmp_path):
    done = cli("run", "--profile", "healthy", *small(), *RESET, "--out", str(tmp_path), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    assert any("prefix cache: emptied before the load (POST /reset_prefix_cache" in n for n in _notes(tmp_path))


def _llamacpp_like(events: list[str], slots: bool):
    """A chat server that records, in order, each slot erased and each load (streamed) request."""
    server = TraceServer(answer_s=0.0)

    async def chat(request: web.Request) -> web.StreamResponse:
        if (await request.json()).get("stream"):
            events.append("load")
        return await server.chat(request)

    async def listed(_: web.Request) -> web.Response:
        return web.json_response([{"id": 0}, {"id": 1}])

    async def erase(request: web.Request) -> web.Response:
        assert request.query.get("action") == "erase"
        events.append(f"erase {request.match_info['slot']}")
        return web.json_response({"id_slot": int(request.match_info["slot"]), "n_erased": 3})

    routes = [web.get("/slots", listed), web.post("/slots/{slot}", erase)] if slots else []
    return chat_app("stub", chat, *routes)


def test_llamacpps_slots_are_each_erased_before_the_first_load_request(tmp_path):
    events: list[str] = []
    with serving(_llamacpp_like(events, slots=True)) as url:
        done = cli("run", "--profile", "healthy", "--base-url", url, *small(), *RESET, "--out", str(tmp_path),
                   "--quiet")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert events[:2] == ["erase 0", "erase 1"] and events[2:] and set(events[2:]) == {"load"}
    assert any("erase for each of its 2 slots" in n for n in _notes(tmp_path))


def test_a_target_with_no_reset_is_refused_before_any_load_request(tmp_path):
    events: list[str] = []
    with serving(_llamacpp_like(events, slots=False)) as url:
        done = cli("run", "--profile", "healthy", "--base-url", url, *small(), *RESET, "--out", str(tmp_path),
                   "--quiet")
    assert done.returncode == 2 and "reset_cache: the target offers no prefix-cache reset" in done.stderr
    assert events == []


def _beside_a_replica(tmp_path, replica_has_slots: bool):
    """A run over a llama.cpp-like target and replica: the command's end, each one's events, the replica's URL."""
    target_events: list[str] = []
    replica_events: list[str] = []
    with serving(_llamacpp_like(target_events, slots=True)) as a, \
            serving(_llamacpp_like(replica_events, slots=replica_has_slots)) as b:
        done = cli("run", "--profile", "healthy", "--base-url", a, "--base-url", b, *small(), *RESET,
                   "--out", str(tmp_path), "--quiet")
    return done, target_events, replica_events, b


def test_every_replica_beside_the_target_is_reset_before_the_first_load_request(tmp_path):
    done, target_events, replica_events, replica = _beside_a_replica(tmp_path, replica_has_slots=True)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    for events in (target_events, replica_events):
        assert events[:2] == ["erase 0", "erase 1"] and events[2:] and set(events[2:]) == {"load"}, events
    (note,) = [n for n in _notes(tmp_path) if n.startswith("prefix cache: emptied")]
    assert "on 1 replica beside the target" in note and replica in note


def test_a_replica_with_no_reset_is_refused_before_any_load_request(tmp_path):
    done, target_events, replica_events, replica = _beside_a_replica(tmp_path, replica_has_slots=False)
    assert done.returncode == 2 and f"the replica at {replica}" in done.stderr, done.stderr
    assert "load" not in target_events and replica_events == []
