"""AIPerf's dag_jsonl replayed through the real client to a test server that records what it received (fixtures
shaped like AIPerf's tests/fixtures/dag/graph_parity/*.dag.jsonl): each turn's messages after the engine's own answer
to the turn before, a fork going on from its parent's history and live answer, a spawn starting fresh and joined at
its join_at, the parent's turns in between running meanwhile, a pre-session spawn started with its parent, and each
turn's max_tokens, tools and extra sent."""

from __future__ import annotations

import json

import pytest

from loadrepro.errors import TraceError
from loadrepro.workload.trace_formats import detect, read_rows
from tests.test_trace_replay import replay
from tests.trace_server import TraceServer

HELPER_HOLD_S = 1.5  # the helper's answers: long enough that the parent's turns meanwhile are seen to go on
TOOL = {"type": "function", "function": {"name": "lookup_docs", "parameters": {"type": "object", "properties": {}}}}
MIXED = [  # mixed_full's shape
    {"session_id": "root", "pre_session_spawns": ["bg"], "turns": [
        {"messages": [{"role": "system", "content": "You are a planner."},
                      {"role": "user", "content": "Draft the migration plan."}], "max_tokens": 32, "tools": [TOOL],
         "extra": {"temperature": 0.5, "top_p": 0.9}, "spawns": [{"children": ["helper"], "join_at": 2}]},
        {"messages": [{"role": "user", "content": "Refine the plan for rollback safety."}], "max_tokens": 24,
         "delay": 20},
        {"messages": [{"role": "user", "content": "Incorporate the helper results and finalize."}], "max_tokens": 16,
         "forks": ["finisher"]}]},
    {"session_id": "helper", "turns": [
        {"messages": [{"role": "user", "content": "Inventory the affected services."}], "max_tokens": 12},
        {"messages": [{"role": "user", "content": "Rank them by risk."}], "max_tokens": 8, "delay": 10}]},
    {"session_id": "finisher", "turns": [
        {"messages": [{"role": "user", "content": "Write the executive summary."}], "max_tokens": 8,
         "extra": {"temperature": 0.1}}]},
    {"session_id": "bg", "turns": [{"messages": [{"role": "user", "content": "Background child work item."}],
                                    "max_tokens": 16}]},
]


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _last_user(got):
    return got.body["messages"][-1]["content"]


def test_a_dag_trace_is_replayed_as_its_forks_spawns_and_joins_say(tmp_path):
    trace = _write(tmp_path / "mixed.dag.jsonl", MIXED)
    assert detect(trace)[0] == "dag"
    server = TraceServer(answer_s=0.1, hold=lambda body: HELPER_HOLD_S if "services" in str(body) or "risk" in
                         str(body) else 0.0)
    with server.running() as url:
        replay(url, tmp_path, trace, "workload.trace_block_tokens=0")
    got = {_last_user(g): g for g in server.received}
    assert len(server.received) == len(got) == 7  # 3 of the root, 2 of the helper, the finisher, the background
    root0, root1, root2 = (got[m] for m in ("Draft the migration plan.", "Refine the plan for rollback safety.",
                                            "Incorporate the helper results and finalize."))
    helper0, helper1 = got["Inventory the affected services."], got["Rank them by risk."]
    finisher, bg = got["Write the executive summary."], got["Background child work item."]
    answer = " ok" * 4  # what the test server streams
    # Each turn goes on from the engine's own answer to the one before.
    assert root1.body["messages"] == [*root0.body["messages"], {"role": "assistant", "content": answer},
                                      {"role": "user", "content": "Refine the plan for rollback safety."}]
    # The fork inherits its parent's history and live answer; the spawn and the background child start fresh.
    assert finisher.body["messages"] == [*root2.body["messages"], {"role": "assistant", "content": answer},
                                         {"role": "user", "content": "Write the executive summary."}]
    assert [m["role"] for m in helper0.body["messages"]] == ["user"] and len(bg.body["messages"]) == 1
    # When: the spawn after the turn that spawned it, the join at join_at, the turn between not waiting.
    assert helper0.arrived_ns >= root0.ended_ns and finisher.arrived_ns >= root2.ended_ns
    assert root2.arrived_ns >= helper1.ended_ns
    assert root1.arrived_ns < helper1.ended_ns - HELPER_HOLD_S * 1e9 / 2
    assert bg.arrived_ns < root0.ended_ns  # started with its parent
    # What each turn asks for.
    assert [g.max_tokens for g in (root0, root1, root2, helper0, helper1, finisher)] == [32, 24, 16, 12, 8, 8]
    assert root0.body["tools"] == [TOOL] and root0.body["temperature"] == 0.5 and finisher.body["temperature"] == 0.1
    assert "tools" not in root1.body


@pytest.mark.parametrize(("lines", "message"), [
    ([{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}], "forks": ["b"]},
                                    {"messages": [{"role": "user", "content": "y"}]}]},
      {"session_id": "b", "turns": [{"messages": [{"role": "user", "content": "z"}]}]}],
     "a bare fork ends its conversation"),
    ([{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}], "spawns": ["nobody"]}]}],
     "'nobody' is not the session_id of a line"),
    ([{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}],
                                     "spawns": [{"children": ["b"], "join_at": 1}]}]},
      {"session_id": "b", "turns": [{"messages": [{"role": "user", "content": "z"}]}]}],
     "join_at 1: a later turn of this conversation"),
    ([{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}]},
                                    {"messages": [{"role": "system", "content": "late"}]}]}],
     "a system message is only allowed on a conversation's first turn"),
    ([{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}], "max_token": 3}]}],
     "max_token: not a dag_jsonl turn field"),
    ([{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}], "spawns": ["b"]}, {
        "messages": [{"role": "user", "content": "y"}]}]},
      {"session_id": "b", "turns": [{"messages": [{"role": "user", "content": "z"}], "spawns": ["a"]},
                                    {"messages": [{"role": "user", "content": "w"}]}]}],
     "every session is some other's branch"),
])
def test_a_broken_dag_names_the_line_and_the_field(tmp_path, lines, message):
    path = _write(tmp_path / "bad.dag.jsonl", lines)
    with pytest.raises(TraceError, match="bad.dag.jsonl") as raised:
        list(read_rows(path, "dag")[1])
    assert message in str(raised.value)
