"""WEKA agent traces replayed through the real client to a test server that records what it received: every request
once with max_tokens = out, prefixes shared as the hash ids say and no more (a subagent only the system prefix, a
compaction turn only the prefix it kept), tool results answering the assistant's tool call, and an agent's turn
sent only once the subagents it waits for have ended (not an async one)."""

from __future__ import annotations

import os

import pytest

from loadrepro.load.backend.processes import split
from loadrepro.sim.tokenizer import render_chat, tokenize
from loadrepro.workload.tokens import block_lead
from loadrepro.workload.trace_formats import detect
from tests.agent_trace_files import BLOCK, weka_trace, write_lines, write_whole
from tests.test_trace_replay import replay
from tests.trace_server import TraceServer

ASYNC_HOLD_S = 3.0  # the async subagent's answer: long enough that a turn waiting for it would be seen to


def _lcp(a, b):
    return len(os.path.commonprefix([a, b]))


def _content(got, marker):
    """Whether a received request's last message holds block `marker` (its own new input)."""
    return block_lead(marker) in got.body["messages"][-1]["content"]


def _replayed(tmp_path, trace, *overrides):
    server = TraceServer(answer_s=0.2, hold=lambda body: ASYNC_HOLD_S if block_lead(60) in str(body) else 0.0)
    with server.running() as url:
        plan, result = replay(url, tmp_path, trace, f"workload.trace_block_tokens={BLOCK}", *overrides)
    return server.received, plan


def _find(received, marker):
    found = [g for g in received if _content(g, marker)]
    assert len(found) == 1, (marker, len(found))
    return found[0]


@pytest.mark.parametrize("layout", ["a trace per file", "a trace per line"])
def test_a_weka_trace_is_replayed_as_its_hash_ids_and_subagents_say(tmp_path, layout):
    trace = (write_whole(tmp_path / "agent.json", weka_trace()) if layout == "a trace per file"
             else write_lines(tmp_path / "agent.jsonl", [weka_trace()]))
    assert detect(trace)[0] == "weka"
    received, plan = _replayed(tmp_path, trace)
    assert len(received) == 7 == len(plan.workload.requests)  # 3 of the root, 2 + 1 + 1 of its subagents
    first, tool_turn, compacted = _find(received, 4), _find(received, 7), _find(received, 91)
    sub_first, sub_second, async_sub, trailing = (_find(received, m) for m in (50, 52, 60, 70))
    assert [g.max_tokens for g in (first, tool_turn, compacted, sub_first, sub_second, async_sub, trailing)] == \
        [20, 8, 6, 5, 5, 4, 4]  # max_tokens = out

    # The tool result answers the call the assistant's recorded reply made.
    roles = [m["role"] for m in tool_turn.body["messages"]]
    assert roles == ["system", "user", "assistant", "tool"], roles
    call = tool_turn.body["messages"][2]["tool_calls"][0]
    assert tool_turn.body["messages"][3]["tool_call_id"] == call["id"] and call["type"] == "function"

    # Prefixes: the root's turns share their history; a subagent shares only the tools and system prompt; the
    # compaction turn only the prefix it kept; none shares more than its hash ids say.
    system = len(tokenize(render_chat(first.body["messages"][:1], add_generation_prompt=False)))
    assert _lcp(tool_turn.tokens, first.tokens) >= system + 2 * BLOCK
    for sub in (sub_first, async_sub, trailing):
        assert system <= _lcp(sub.tokens, first.tokens) < system + BLOCK
    kept = len(tokenize(render_chat(compacted.body["messages"][:2], add_generation_prompt=False)))
    assert kept - 1 <= _lcp(compacted.tokens, tool_turn.tokens) < kept + BLOCK
    assert _lcp(sub_second.tokens, sub_first.tokens) >= system + BLOCK  # the subagent's own history

    # Joins: the tool turn waited for the subagent spawned before it; the compaction turn not for the async one.
    assert tool_turn.arrived_ns >= sub_second.ended_ns
    assert compacted.arrived_ns < async_sub.ended_ns
    assert async_sub.ended_ns - async_sub.arrived_ns >= ASYNC_HOLD_S * 1e9


def test_tool_results_are_plain_user_text_when_asked(tmp_path):
    received, _ = _replayed(tmp_path, write_lines(tmp_path / "agent.jsonl", [weka_trace()]),
                            "workload.trace_tool_messages='user'")
    tool_turn = _find(received, 7)
    assert [m["role"] for m in tool_turn.body["messages"]] == ["system", "user", "assistant", "user"]
    assert not any("tool_calls" in m for m in tool_turn.body["messages"])


@pytest.mark.parametrize("scope", ["local", "global"])
def test_hash_ids_are_one_text_in_their_scope(tmp_path, scope):
    """Two traces with the same hash ids: in a local scope each its own text (nothing shared between them); in a
    global scope the same text (their system prompts shared)."""
    trace = write_lines(tmp_path / "two.jsonl", [weka_trace("one", scope), weka_trace("two", scope)])
    received, _ = _replayed(tmp_path, trace)
    one, two = [g for g in received if g.max_tokens == 20]  # each trace's first request
    system = len(tokenize(render_chat(one.body["messages"][:1], add_generation_prompt=False)))
    shared = _lcp(one.tokens, two.tokens)
    assert (shared >= system + 2 * BLOCK) if scope == "global" else (shared < BLOCK), shared


def test_workers_send_an_agent_and_its_subagents_from_one_process(tmp_path):
    import asyncio

    from loadrepro.config.profile_files import load_profile
    from loadrepro.workload.plan import plan_workload
    from loadrepro.workload.tokens import SimTokenCounter

    trace = write_lines(tmp_path / "two.jsonl", [weka_trace("one"), weka_trace("two")])
    profile = load_profile("trace-example", [f"workload.trace='{trace}'", "workload.trace_format='auto'",
                                             f"workload.trace_block_tokens={BLOCK}", "load.concurrency=4"])
    workload = asyncio.run(plan_workload(profile, SimTokenCounter())).workload
    shares = split(profile.load, workload, 2)
    trees = [{c.root for c in share.workload.conversations} for share in shares]
    assert trees[0].isdisjoint(trees[1]) and all(len(t) == 1 for t in trees)
    assert sum(len(share.workload.conversations) for share in shares) == len(workload.conversations) == 8


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: t.pop("block_size"), "block_size: missing"),
    (lambda t: t.update(hash_id_scope="team"), "hash_id_scope: 'team': local or global"),
    (lambda t: t.update(requests=[]), "requests: missing, empty or not a list"),
    (lambda t: t["requests"][0].update(hash_ids=["a"]), "hash_ids: must be a list of integers"),
    (lambda t: t["requests"][0].pop("in"), "request 1: in: missing"),
])
def test_a_broken_agent_trace_names_the_file_and_the_field(tmp_path, change, message):
    from loadrepro.errors import TraceError
    from loadrepro.workload.trace_formats import read_rows

    trace = weka_trace()
    change(trace)
    path = write_lines(tmp_path / "bad.jsonl", [trace])
    with pytest.raises(TraceError, match=str(path)) as raised:
        list(read_rows(path, "weka")[1])
    assert message in str(raised.value)


def test_traces_of_one_file_share_a_block_size(tmp_path):
    from loadrepro.errors import TraceError
    from loadrepro.workload.trace_formats import read_rows

    other = weka_trace("two")
    other["block_size"] = 32
    path = write_lines(tmp_path / "mixed.jsonl", [weka_trace("one"), other])
    with pytest.raises(TraceError, match=r"mixed.jsonl:2: block_size: 32; the file's first trace has 16"):
        list(read_rows(path, "weka")[1])


def test_trace_inspect_counts_an_agent_traces_trees_subagents_tool_turns_and_compactions(tmp_path):
    import json as json_

    from tests.helpers import cli

    trace = write_lines(tmp_path / "two.jsonl", [weka_trace("one"), weka_trace("two")])
    done = cli("trace", "inspect", str(trace), "--json")
    assert done.returncode == 0, done.stderr
    stats = json_.loads(done.stdout)
    assert stats["format"] == "weka" and stats["block_tokens"] == BLOCK and stats["requests"] == 14
    assert stats["agents"] == {"trees": 2, "subagents": 6, "joins": 2, "tool_turns": 2, "compactions": 2}
    assert stats["cacheable_own_tokens"] == stats["cacheable_tokens"] > 0  # local ids: no tree shares another's


def test_trace_inspect_tells_reuse_within_a_tree_from_reuse_across_trees(tmp_path):
    """Two copies of one agent trace: with local hash ids (each trace its own scope) every cacheable block is its
    own tree's; with global ids the second tree also finds the first one's blocks, counted apart."""
    import json as json_

    from tests.helpers import cli

    def inspected(scope: str) -> dict:
        trace = write_lines(tmp_path / f"{scope}.jsonl", [weka_trace("one", scope), weka_trace("two", scope)])
        done = cli("trace", "inspect", str(trace), "--json")
        assert done.returncode == 0, done.stderr
        return json_.loads(done.stdout)

    local, shared = inspected("local"), inspected("global")
    assert shared["cacheable_own_tokens"] == local["cacheable_own_tokens"] == local["cacheable_tokens"]
    across = shared["cacheable_tokens"] - shared["cacheable_own_tokens"]
    # the second tree's first request finds the first tree's 4 blocks; each of its subagents' third block too
    assert across >= 4 * BLOCK and shared["cacheable_tokens"] == local["cacheable_tokens"] + across, (local, shared)


def test_an_idle_gap_cap_cuts_every_long_gap_between_starts_and_every_long_think_time(tmp_path):
    import asyncio
    import json as json_

    from loadrepro.config.profile_files import load_profile
    from loadrepro.workload.plan import plan_workload
    from loadrepro.workload.tokens import SimTokenCounter

    trace = tmp_path / "gaps.jsonl"
    rows = [{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1, 2]},
            {"timestamp": 200, "input_length": 40, "output_length": 4, "hash_ids": [3, 4]},
            {"timestamp": 60200, "input_length": 40, "output_length": 4, "hash_ids": [5, 6], "session_id": 9},
            {"delay": 30000, "session_id": 9, "input_length": 60, "output_length": 4, "hash_ids": [5, 6, 7]}]
    trace.write_text("".join(json_.dumps(r) + "\n" for r in rows))

    def planned(*more):
        profile = load_profile("trace-example", [f"workload.trace='{trace}'", "workload.trace_format='mooncake'",
                                                 "workload.trace_block_tokens=16", *more])
        requests = asyncio.run(plan_workload(profile, SimTokenCounter())).workload.requests
        return [(r.arrival_s, r.delay_s) for r in requests]

    assert planned() == [(0.0, 0.0), (0.2, 0.0), (60.2, 0.0), (None, 30.0)]
    assert planned("workload.trace_idle_cap_s=0.5") == [(0.0, 0.0), (0.2, 0.0), (0.7, 0.0), (None, 0.5)]


def test_a_weka_requests_think_time_is_its_least_wait_after_the_answer_before(tmp_path):
    import asyncio

    from loadrepro.config.profile_files import load_profile
    from loadrepro.workload.plan import plan_workload
    from loadrepro.workload.tokens import SimTokenCounter

    trace = write_lines(tmp_path / "agent.jsonl", [weka_trace()])
    profile = load_profile("trace-example", [f"workload.trace='{trace}'", "workload.trace_block_tokens=0"])
    workload = asyncio.run(plan_workload(profile, SimTokenCounter())).workload
    root = workload.conversations[0]
    assert [(t.arrival_s, t.delay_s) for t in root.turns] == [(0.0, 0.0), (0.6, 0.1), (1.0, 0.0)]


def test_a_subagents_times_are_read_from_its_spawn_only_when_its_first_falls_before_it(tmp_path):
    """Absolute inner times a rounding below the spawn stay absolute; times from zero are counted from the spawn."""
    from loadrepro.workload.trace_formats import read_rows

    trace = weka_trace()
    trace["requests"][5]["t"] = 1.2000004  # subagent c's spawn, its first request at 1.2 (rounded): absolute
    trace["requests"][5]["requests"][0]["t"] = 1.2
    path = write_lines(tmp_path / "agent.jsonl", [trace])
    times: dict[str, float] = {}
    for r in read_rows(path, "weka")[1]:
        if r.tree is not None:
            times.setdefault(r.session.rsplit(":", 1)[-1], r.timestamp_s)  # each subagent's first request
    assert times["a"] == pytest.approx(0.3) and times["b"] == pytest.approx(0.8) and times["c"] == pytest.approx(1.2)


def test_the_run_report_tells_reuse_within_a_tree_from_reuse_across_trees(tmp_path):
    """The report's prefix reuse, over the completed requests, split as trace inspect splits the trace's."""
    import json as json_

    from tests.helpers import cli

    def run(scope: str) -> tuple[dict, dict]:
        trace = write_lines(tmp_path / f"{scope}.jsonl", [weka_trace("one", scope), weka_trace("two", scope)])
        inspected = json_.loads(cli("trace", "inspect", str(trace), "--json").stdout)
        with TraceServer(answer_s=0.0).running() as url:
            done = cli("run", "--profile", "trace-example", "--base-url", url, "--set", f"workload.trace='{trace}'",
                       "--set", "workload.trace_format='auto'", "--set", f"workload.trace_block_tokens={BLOCK}",
                       "--out", str(tmp_path / scope), "--quiet")
        assert done.returncode == 0, done.stdout + done.stderr
        report = json_.loads((tmp_path / scope / "report.json").read_text())
        assert report["requests"]["by_outcome"] == {"ok": 14}
        return inspected, report["workload"]["prefix_reuse"]

    for scope in ("local", "global"):
        inspected, reuse = run(scope)
        assert (reuse["possible_tokens"], reuse["own_tokens"]) == \
            (inspected["cacheable_tokens"], inspected["cacheable_own_tokens"]), (scope, inspected, reuse)
    assert reuse["possible_tokens"] - reuse["own_tokens"] >= 4 * BLOCK  # global ids: the second tree finds the first's
