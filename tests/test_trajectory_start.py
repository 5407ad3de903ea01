"""[workload] trajectory_start: each tree started at a point of its span. Its requests before the point are not
sent, except the last of each session that goes on past it, a warm-up sent before the load with its whole history
and max_tokens 1, kept out of the verdict; judged from what a test server received."""

from __future__ import annotations

import json

from aiohttp import web

from loadrepro.config.profile_files import load_profile
from loadrepro.workload.plan import trace_of
from loadrepro.workload.tokens import block_lead
from tests.agent_trace_files import BLOCK, weka_trace, write_lines
from tests.helpers import cli
from tests.stub_server import chat_app, serving
from tests.trace_server import TraceServer

HALF = "workload.trajectory_start=[0.5, 0.5]"


def _weka(tmp_path):
    return write_lines(tmp_path / "agent.jsonl", [weka_trace()])


def _overrides(trace, *more):
    return [flag for o in (f"workload.trace='{trace}'", "workload.trace_format='auto'",
                           f"workload.trace_block_tokens={BLOCK}", *more) for flag in ("--set", o)]


def test_the_tree_starts_at_its_point_with_one_warm_up_per_session_that_goes_on(tmp_path):
    """The fixture's tree spans 0-1.3 s; at 0.65 s the root's first turn and subagent a (ended) are left out, the
    root's tool turn (0.6 s) is its warm-up, and its compaction turn, b and c are replayed, moved back 0.65 s."""
    profile = load_profile("trace-example", [f"workload.trace='{_weka(tmp_path)}'", "workload.trace_format='auto'",
                                             HALF])
    trace = trace_of(profile)
    assert trace is not None
    (warm,) = trace.warmups
    assert warm.hash_ids == (1, 2, 3, 4, 5, 6, 7) and warm.output_length == 1 and warm.timestamp_s is None
    assert trace.left_out == 3
    assert [r.hash_ids[-1] for r in trace.rows] == [60, 91, 70]  # in file order: b, the compaction, c
    assert [round(r.timestamp_s or 0, 3) for r in trace.rows] == [0.15, 0.35, 0.65]
    assert trace.warm_common == (0,) and trace.common[1] == 3  # the compaction turn finds the warm-up's 3 blocks
    whole = trace_of(load_profile("trace-example", [f"workload.trace='{_weka(tmp_path)}'",
                                                    "workload.trace_format='auto'"]))
    assert whole is not None and not whole.warmups and len(whole.rows) == 7


def test_warm_ups_go_first_and_only_the_load_after_them_is_judged(tmp_path):
    server = TraceServer(answer_s=0.05)
    with server.running() as url:
        done = cli("run", "--profile", "trace-example", "--base-url", url, *_overrides(_weka(tmp_path), HALF),
                   "--out", str(tmp_path / "run"), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    first, *load = server.received
    assert first.max_tokens == 1 and block_lead(7) in first.body["messages"][-1]["content"]
    assert len(load) == 3 and all(g.max_tokens > 1 for g in load)
    assert all(g.arrived_ns >= first.ended_ns for g in load)  # the load begins once the warm-up answered
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["requests"]["total"] == 3
    warm = [json.loads(line) for line in (tmp_path / "run" / "warmup.jsonl").read_text().splitlines()]
    assert [(w["outcome"], w["max_tokens"]) for w in warm] == [("ok", 1)]
    assert any(n.startswith("mid-trajectory start: 1 warm-up requests") for n in report["notes"])


def _failing_warm_ups(server: TraceServer):
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("stream") and body.get("max_tokens") == 1:
            return web.json_response({"error": {"message": "warm-up refused"}}, status=500)
        return await server.chat(request)

    return chat_app("trace-stub", chat)


def test_a_failed_warm_up_is_said_but_is_not_the_runs_verdict(tmp_path):
    server = TraceServer(answer_s=0.05)
    with serving(_failing_warm_ups(server)) as url:
        done = cli("run", "--profile", "trace-example", "--base-url", url, *_overrides(_weka(tmp_path), HALF),
                   "--out", str(tmp_path / "run"), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["verdict"] == "pass" and report["requests"]["total"] == 3
    (note,) = [n for n in report["notes"] if n.startswith("mid-trajectory start")]
    assert "warm-up refused" in note


def test_agent_sessions_start_mid_way_with_their_spawns_and_joins_still_whole():
    """Agent sessions have no times: the point is a place in each tree's order. Every spawn and join the replay
    keeps names a conversation and a turn that are replayed."""
    profile = load_profile("agents-draft-pool", [HALF])
    trace = trace_of(profile)
    whole = trace_of(load_profile("agents-draft-pool", []))
    assert trace is not None and whole is not None
    assert trace.warmups and trace.left_out
    assert len(trace.rows) + len(trace.warmups) + trace.left_out == len(whole.rows)
    sessions = {r.session for r in trace.rows}
    turns = {s: sum(r.session == s for r in trace.rows) for s in sessions}
    for row in trace.rows:
        assert all(j in sessions for j in row.joins)
        if row.spawned_by is not None:
            parent, turn = row.spawned_by
            assert parent in sessions and 0 <= turn <= turns[parent]
    assert {w.session for w in trace.warmups} <= sessions


def test_a_warm_up_carries_its_trees_cache_bust_marker(tmp_path):
    server = TraceServer(answer_s=0.05)
    with server.running() as url:
        done = cli("run", "--profile", "trace-example", "--base-url", url,
                   *_overrides(_weka(tmp_path), HALF, "workload.cache_bust='tree'"), "--out", str(tmp_path / "run"),
                   "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr

    def marker(got):
        return got.body["messages"][0]["content"].split("\n", 1)[0]

    warm = next(g for g in server.received if g.max_tokens == 1)
    compaction = next(g for g in server.received if block_lead(91) in g.body["messages"][-1]["content"])
    assert marker(warm).startswith("[rid:") and marker(warm) == marker(compaction)


def test_a_bundle_sends_its_warm_ups_before_its_requests(tmp_path):
    import gzip
    import subprocess
    import sys
    import zipfile

    from loadrepro.report.bundle import make_bundle

    with TraceServer(answer_s=0.05).running() as url:
        done = cli("run", "--profile", "trace-example", "--base-url", url, *_overrides(_weka(tmp_path), HALF),
                   "--out", str(tmp_path / "run"), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    with zipfile.ZipFile(make_bundle(tmp_path / "run", tmp_path / "bundle.zip")) as bundle:
        bundle.extractall(tmp_path / "unpacked")
    folder = next((tmp_path / "unpacked").iterdir())
    with gzip.open(folder / "workload.jsonl.gz", "rt") as lines:
        kinds = [json.loads(line)["type"] for line in lines]
    assert kinds.count("warmup") == 1 and kinds.count("request") == 3
    server = TraceServer(answer_s=0.05)
    with server.running() as url:
        replayed = subprocess.run([sys.executable, "replay.py", "--base-url", url], cwd=folder, capture_output=True,
                                  text=True, timeout=120)
    assert replayed.returncode == 0 and "engine passed" in replayed.stdout, replayed.stdout + replayed.stderr
    first, *load = server.received
    assert first.max_tokens == 1 and len(load) == 3 and all(g.arrived_ns >= first.ended_ns for g in load)
