"""What a trace replay says of its sessions and when it sends their turns: a session header ([workload]
session_header) whose value is each request's own session, the same for all of its requests, and none by default;
trace_pacing's three ways to time a session's later turns, as planned offsets and waits (the runner waits them)."""

from __future__ import annotations

import asyncio

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.workload.plan import plan_workload
from loadrepro.workload.tokens import SCOPE_BITS, SimTokenCounter, block_lead
from tests.agent_trace_files import BLOCK, weka_trace, write_lines
from tests.test_trace_replay import replay
from tests.trace_server import TraceServer

# A block each session's own requests send as their new input (tests/agent_trace_files.py), and that session.
MARKERS = {4: "", 7: "", 91: "", 50: "::sa:a", 52: "::sa:a", 60: "::sa:b", 70: "::sa:c"}



def _session_of(received) -> str:
    """The session a received request belongs to, from the block its last message starts its own input with."""
    last = received.body["messages"][-1]["content"]
    found = {f"w{k}:agent-{k + 1}{suffix}" for k in (0, 1) for marker, suffix in MARKERS.items()
             if block_lead((k << SCOPE_BITS) + marker) in last}
    assert len(found) == 1, found
    return found.pop()


def _two_traces(tmp_path):
    return write_lines(tmp_path / "agents.jsonl", [weka_trace("agent-1"), weka_trace("agent-2")])


def test_each_request_carries_its_own_sessions_header(tmp_path):
    server = TraceServer(answer_s=0.05)
    with server.running() as url:
        replay(url, tmp_path, _two_traces(tmp_path), "workload.session_header='x-session-id'")
    assert len(server.received) == 14
    values = {}
    for got in server.received:
        session = _session_of(got)
        assert got.headers["x-session-id"] == session
        values.setdefault(session, set()).add(got.headers["x-session-id"])
    assert len(values) == 8 and all(len(v) == 1 for v in values.values())  # 2 roots, 6 subagents


def test_no_session_header_by_default(tmp_path):
    server = TraceServer(answer_s=0.05)
    with server.running() as url:
        replay(url, tmp_path, _two_traces(tmp_path))
    assert len(server.received) == 14
    assert not any(k.lower() == "x-session-id" for got in server.received for k in got.headers)


def test_conversations_carry_their_conversations_header():
    profile = load_profile("quickstart", ["workload.conversations=3", "workload.prefix_tokens=200",
                                          "workload.turn_tokens=20", "workload.session_header='x-sticky'"])
    plan = asyncio.run(plan_workload(profile, SimTokenCounter()))
    for conversation in plan.workload.conversations:
        assert {r.headers for r in conversation.turns} == {(("x-sticky", f"conversation-{conversation.index}"),)}


def test_a_session_header_name_must_be_a_header_name():
    with pytest.raises(Exception, match="session_header"):
        load_profile("quickstart", ["workload.session_header='x session'"])


# One agent: turns at 0, 10 and 30 s; answers recorded as taking 2 and 5 s; think times 1 and 4 s.
PACED = {"id": "paced", "block_size": BLOCK, "requests": [
    {"t": 0.0, "in": 2 * BLOCK, "out": 4, "hash_ids": [1, 2], "api_time": 2.0, "think_time": 0.0},
    {"t": 10.0, "in": 4 * BLOCK, "out": 4, "hash_ids": [1, 2, 3, 4], "api_time": 5.0, "think_time": 1.0},
    {"t": 30.0, "in": 6 * BLOCK, "out": 4, "hash_ids": [1, 2, 3, 4, 5, 6], "api_time": 1.0, "think_time": 4.0},
]}


def _paced(tmp_path, *overrides):
    trace = write_lines(tmp_path / "paced.jsonl", [PACED])
    profile = load_profile("trace-example", [f"workload.trace='{trace}'", "workload.trace_format='weka'",
                                             "workload.trace_block_tokens=0", *overrides])
    turns = asyncio.run(plan_workload(profile, SimTokenCounter())).workload.conversations[0].turns
    return [(t.arrival_s, t.delay_s) for t in turns]


@pytest.mark.parametrize("pacing,expected", [
    ("recorded", [(0.0, 0.0), (10.0, 1.0), (30.0, 4.0)]),  # at its time, no sooner than its think time after
    ("end_to_start", [(0.0, 0.0), (None, 8.0), (None, 15.0)]),  # 10 - (0 + 2), 30 - (10 + 5)
    ("think_only", [(0.0, 0.0), (None, 1.0), (None, 4.0)]),
])
def test_trace_pacing_times_a_sessions_later_turns(tmp_path, pacing, expected):
    assert _paced(tmp_path, f"workload.trace_pacing='{pacing}'") == expected


def test_trace_pacing_keeps_speed_and_idle_cap(tmp_path):
    assert _paced(tmp_path, "workload.trace_pacing='end_to_start'", "workload.trace_speed=2",
                  "workload.trace_idle_cap_s=5") == [(0.0, 0.0), (None, 4.0), (None, 5.0)]
