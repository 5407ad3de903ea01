"""Kept-alive connections that servers and proxies close are absorbed, counted and reported, never outcomes; real
failures on the same servers still classify. Whole runs through the real client over loopback sockets."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.runs.run_options import RunOptions
from loadrepro.runs.session import run_session
from tests.helpers import cli
from tests.netservers import RawServer

ROOT = Path(__file__).resolve().parents[1]
# 500 conversations x 4 turns = 2,000 streamed requests of a few tokens each.
LOAD = ["workload.conversations=500", "workload.turns=4", "workload.prefix_tokens=120", "workload.turn_tokens=12",
        "workload.max_tokens=4", "workload.warm_max_tokens=4", "load.concurrency=8", "load.request_timeout_s=30",
        "load.stall_timeout_s=10", "watch.metrics_path=''", "watch.health_interval_s=0.2", "model='raw'"]


def run(url: str, out: Path, overrides: list[str] = LOAD):
    options = RunOptions(load_profile("quickstart", overrides), url, None, "run", out, quiet=True)
    return asyncio.run(run_session(options, say=lambda text: None))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("server,reconnects,timing", [
    (RawServer("close_after_stream"), True, []),  # (a) closes after every streamed answer while saying keep-alive
    # (b) closes connections idle for 50 ms without a word; conversations start at 40/s, so that pooled connections
    # sit idle about that long
    (RawServer("idle_close", idle_s=0.05), True, ["load.arrival='poisson'", "load.rate=40"]),
    (RawServer("connection_close"), False, []),  # (c) Connection: close every time: never reused, nothing to resend
    (RawServer("max_requests", max_requests=5), True, []),  # (d) closes after 5 requests a connection, unannounced
], ids=["close-after-stream", "idle-close", "connection-close", "max-requests"])
@pytest.mark.slow
def test_closed_pooled_connections_are_resent_not_failures(server, reconnects, timing, tmp_path):
    with server.running():
        session = run(server.url, tmp_path, LOAD + timing)
    report = session.report
    assert report.requests.by_outcome == {"ok": 2000}, report.reasons
    assert report.verdict == "pass", report.reasons
    assert (report.requests.reconnects > 0) is reconnects, report.requests.reconnects
    assert server.counters.streamed == 2000  # a resent request had never reached the engine: none ran twice
    assert report.health.transitions[-1].status == 200 and all(t.status == 200 for t in report.health.transitions)
    print(f"{server.policy}: {report.requests.reconnects} reconnects in 2000 requests, "
          f"{server.counters.connections} connections, {server.counters.closed_by_policy} closed by the server")
    if reconnects:
        md = (tmp_path / "report.md").read_text()
        assert f"{report.requests.reconnects} requests were resent at once on a new connection" in md


@pytest.mark.timeout(120)
def test_a_stream_cut_mid_way_is_truncated_not_resent(tmp_path):
    server = RawServer("close_after_stream", cut_request=150)
    with server.running():
        session = run(server.url, tmp_path, [*LOAD, "workload.conversations=100"])
    report = session.report
    assert report.requests.by_outcome.get("truncated") == 1, report.requests
    assert report.verdict == "fail" and report.first_failure.outcome == "truncated"
    cut = next(r for r in session.result.records if r.outcome.value == "truncated")
    assert len(cut.chunk_ns) == 2
    # Response bytes had arrived, so the cut request was not sent again: no request reached the engine twice.
    assert server.counters.streamed == len(session.result.records)


@pytest.mark.timeout(120)
def test_an_engine_process_that_exits_mid_run_fails_the_run_at_the_exit(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "tests.netservers", "--policy", "close_after_stream",
                                "--exit-after", "300"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = process.stdout.readline().strip()
        session = run(url, tmp_path, [*LOAD, "workload.conversations=200"])
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    report, records = session.report, session.result.records
    outcomes = report.requests.by_outcome
    assert outcomes.get("ok", 0) <= 300 and set(outcomes) <= {"ok", "truncated", "unreachable", "cancelled"}
    assert outcomes.get("truncated", 0) + outcomes.get("unreachable", 0) >= 1
    assert report.verdict == "fail"
    exit_ns = max(r.end_ns for r in records if r.outcome.value == "ok")
    failed = [r for r in records if r.outcome.value in ("truncated", "unreachable")]
    assert min(r.end_ns for r in failed) >= exit_ns - 1_000_000_000  # failures start at the exit, not before
    assert any(r.name == "engine_death" and r.fired for r in report.rules), report.reasons


@pytest.mark.timeout(120)
def test_probes_carry_no_conversations_opening_before_its_first_turn(tmp_path):
    server = RawServer("keep_alive")
    with server.running():
        session = run(server.url, tmp_path, [*LOAD, "workload.conversations=12", "workload.turns=2",
                                             "workload.prefix_tokens=3000", "load.concurrency=4"])
    received = server.counters.received
    firsts = [c.turns[0].payload()["messages"] for c in session.plan.workload.conversations]

    def text(body: dict) -> str:
        return "\n".join(m["content"] for m in body.get("messages", []))

    for messages in firsts:
        opening = "\n".join(m["content"] for m in messages)[:1000]
        own = messages[-1]["content"][:1000]  # the conversation's own document, after the shared system prompt
        arrived = next(i for i, body in enumerate(received) if body.get("messages") == messages)
        assert not any(opening in text(body) or own in text(body) for body in received[:arrived])
    report = session.report
    probes = [body for body in received if not body.get("stream")]
    assert report.calibration.probe_requests == len(probes) and 0 < len(probes) <= 64
    assert 0 < report.calibration.probe_tokens <= 0.05 * sum(r.expected_prompt_tokens
                                                             for r in session.plan.workload.requests)
    assert report.lengths.requests == 24 and report.lengths.error_p95 <= 0.05
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["calibration"]["probe_requests"] == len(probes) and data["lengths"]["worst"]["planned"] > 0
    assert f"lengths counted with {len(probes)} probe requests" in (tmp_path / "report.md").read_text()
    print(f"probe-only target: {len(probes)} probes, {report.calibration.probe_tokens} tokens; length error "
          f"p50 {report.lengths.error_p50:.2%} p95 {report.lengths.error_p95:.2%} max {report.lengths.error_max:.2%}")


def test_an_unreachable_target_exits_1_naming_the_url_and_what_was_tried():
    done = cli("run", "--base-url", "http://127.0.0.1:9", "--quiet")
    assert done.returncode == 1, done.stderr
    assert "http://127.0.0.1:9 could not be reached" in done.stderr and "GET /health" in done.stderr
    assert "GET /v1/models" in done.stderr
