"""Agent sessions from the seed ([workload] kind = "agents") sent through the real client to a test server that records
what it received: subagents start once the turn that spawned them answered and share only the shared prompt, the
agent's next turn waits for them, tool results answer the call before, a request past the context limit is
compacted, the same seed sends the same bytes, and the built-in profile breaks the simulated draft pool on stock."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.load.client import Client, ClientConfig
from loadrepro.load.run_target import RunTarget
from loadrepro.load.runner import Runner
from loadrepro.sim.tokenizer import render_chat, tokenize
from loadrepro.workload.plan import plan_workload
from loadrepro.workload.tokens import SimTokenCounter
from tests.helpers import cli
from tests.trace_server import TraceServer

SMALL = ["workload.agents.agents=2", "workload.agents.turns=4", "workload.agents.block_tokens=16",
         "workload.agents.system_tokens=64", "workload.agents.task_tokens=32", "workload.agents.tool_result_tokens=48",
         "workload.agents.tool_result_tokens_p95=0",
         "workload.agents.reply_tokens=8", "workload.agents.tool_latency_s=0.05",
         "workload.agents.subagent_probability=1.0", "workload.agents.subagent_fanout=2",
         "workload.agents.subagent_turns=2", "workload.agents.context_limit_tokens=256",
         "workload.agents.summary_tokens=32", "load.concurrency=16"]


def _profile(*more):
    return load_profile("agents-draft-pool", [*SMALL, *more])


def _plan(profile):
    return asyncio.run(plan_workload(profile, SimTokenCounter())).workload


def _sent(tmp_path, profile):
    server = TraceServer(answer_s=0.2)

    async def go(url):
        workload = (await plan_workload(profile, SimTokenCounter())).workload
        config = ClientConfig(url, profile.api, "trace-stub", profile.load.concurrency,
                              profile.load.request_timeout_s, profile.load.stall_timeout_s)
        async with Client(config) as client:
            await Runner(profile, workload, client, RunTarget(url, "trace-stub", "test"), tmp_path).run()
        return workload

    with server.running() as url:
        workload = asyncio.run(go(url))
    by_body = {json.dumps(g.body["messages"]): g for g in server.received}
    got = {(r.conversation, r.turn): by_body[json.dumps(r.payload()["messages"])] for r in workload.requests}
    assert len(server.received) == len(got) == len(workload.requests)  # each planned request sent once
    return workload, got


def _lcp(a, b):
    return len(os.path.commonprefix([a, b]))


def test_agents_spawn_join_call_tools_and_compact_as_generated(tmp_path):
    workload, got = _sent(tmp_path, _profile())
    roots = [c for c in workload.conversations if c.tree is None]
    children = [c for c in workload.conversations if c.tree is not None]
    assert len(roots) == 2 and len(children) == 2 * 3 * 2  # every answer but the last spawns two
    for child in children:
        parent, turn = child.spawned_by
        spawner, first = got[(parent, turn)], got[(child.index, 1)]
        assert first.arrived_ns >= spawner.ended_ns  # started once the turn that spawned it answered
        joiner = got[(parent, turn + 1)]
        assert joiner.arrived_ns >= got[(child.index, len(child.turns))].ended_ns  # the agent waited for it
        system = len(tokenize(render_chat(spawner.body["messages"][:1], add_generation_prompt=False)))
        assert system <= _lcp(first.tokens, got[(parent, 1)].tokens) < system + 16  # the shared prompt alone
    messages = [got[(roots[0].index, t)].body["messages"] for t in range(1, 5)]
    assert [m["role"] for m in messages[1]] == ["system", "user", "assistant", "tool"]
    assert messages[1][3]["tool_call_id"] == messages[1][2]["tool_calls"][0]["id"]
    compacted = [m for m in messages if len(tokenize(render_chat(m))) < len(tokenize(render_chat(messages[1])))]
    assert compacted and all(m[-1]["role"] == "user" and m[-2]["role"] != "assistant" for m in compacted)
    assert max(len(got[(roots[0].index, t)].tokens) for t in range(1, 5)) <= 256 + 64  # the limit, and its template


def test_the_same_seed_generates_the_same_bytes_and_another_seed_others():
    def bodies(*more):  # the built-in profile's blocks and tool results, two agents of it
        profile = load_profile("agents-draft-pool", ["workload.agents.agents=2", *more])
        return [json.dumps(r.payload()) for r in _plan(profile).requests]

    assert bodies() == bodies()
    assert bodies() != bodies("workload.seed=4")


@pytest.mark.slow
def test_ab_on_agents_that_overrun_the_draft_pool_confirms_the_fix(tmp_path):
    done = cli("ab", "--profile", "agents-draft-pool", "--out", str(tmp_path), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fix confirmed" in done.stdout and "Draft KV cache context resize failed" in done.stdout
    stock = json.loads((tmp_path / "stock" / "report.json").read_text())
    assert stock["workload"]["kind"] == "agents"


def test_concurrency_in_sessions_runs_one_agent_tree_at_a_time_and_its_subagents_together(tmp_path):
    """concurrency = 1 session: the second agent begins once the first and its subagents have all ended; within a
    tree, the subagents spawned together run at once (two requests in flight, more than one session's concurrency
    of requests would allow)."""
    profile = _profile("load.concurrency=1", "load.concurrency_unit='session'")
    workload, got = _sent(tmp_path, profile)
    trees: dict[int, list] = {}
    for (conversation, _), received in got.items():
        trees.setdefault(workload.conversations[conversation].root, []).append(received)
    (first, second) = sorted(trees.values(), key=lambda r: min(g.arrived_ns for g in r))
    assert min(g.arrived_ns for g in second) >= max(g.ended_ns for g in first)
    spans = sorted((g.arrived_ns, g.ended_ns) for g in first)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:]))  # two of one tree in flight at once


def test_the_report_gives_each_agent_trees_figures_and_none_for_conversations(tmp_path):
    """report.json agents: the trees that spawned subagents, completed, their fan-out and the turns that waited for
    their subagents, the waits as long as the subagents' own requests ran after the agent's turn before."""
    server = TraceServer(answer_s=0.2)
    overrides = [flag for o in (*SMALL, "workload.agents.context_limit_tokens=0") for flag in ("--set", o)]
    with server.running() as url:
        done = cli("run", "--profile", "agents-draft-pool", "--base-url", url, *overrides, "--out",
                   str(tmp_path / "agents"), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    agents = json.loads((tmp_path / "agents" / "report.json").read_text())["agents"]
    assert {k: agents[k] for k in ("trees", "completed", "subagents", "fanout_max", "joins")} == \
        {"trees": 2, "completed": 2, "subagents": 12, "fanout_max": 6, "joins": 6}
    assert agents["join_wait_s_max"] >= 2 * 0.2 and agents["join_wait_s_total"] >= 6 * 2 * 0.2  # two turns of 0.2 s
    assert agents["makespan_s_p50"] >= agents["join_wait_s_total"] / 2
    plain = cli("run", "--profile", "healthy", "--set", "workload.conversations=2", "--out", str(tmp_path / "plain"),
                "--quiet")
    assert plain.returncode == 0 and json.loads((tmp_path / "plain" / "report.json").read_text())["agents"] is None


def test_a_bundle_replays_agent_trees_spawning_and_joining_as_the_run_did(tmp_path):
    """replay.py (standard library only) starts each subagent once the turn that spawned it answered and holds the
    turn that joins subagents until they ended, as the workload file it reads says."""
    import gzip
    import subprocess
    import sys
    import zipfile

    from loadrepro.report.bundle import make_bundle

    with TraceServer(answer_s=0.1).running() as url:
        cli("run", "--profile", "agents-draft-pool", *(f for s in SMALL for f in ("--set", s)), "--base-url", url,
            "--out", str(tmp_path / "run"), "--quiet")
    with zipfile.ZipFile(make_bundle(tmp_path / "run", tmp_path / "bundle.zip")) as bundle:
        bundle.extractall(tmp_path / "unpacked")
    folder = next((tmp_path / "unpacked").iterdir())
    with gzip.open(folder / "workload.jsonl.gz", "rt") as lines:
        rows = [json.loads(line) for line in lines][1:]
    server = TraceServer(answer_s=0.1)
    with server.running() as url:
        done = subprocess.run([sys.executable, "replay.py", "--base-url", url], cwd=folder, capture_output=True,
                              text=True, timeout=120)
    assert done.returncode == 0 and "engine passed" in done.stdout, done.stdout + done.stderr
    by_body = {json.dumps(g.body["messages"]): g for g in server.received}
    got = {(r["conversation"], r["turn"]): by_body[json.dumps(r["body"]["messages"])] for r in rows}
    assert len(server.received) == len(rows) == len(got)
    last = {c: max(t for (k, t) in got if k == c) for c, _ in got}
    spawned = [r for r in rows if "spawned_by" in r]
    joining = [r for r in rows if r.get("joins")]
    assert len(spawned) == 12 and len(joining) == 6, (len(spawned), len(joining))
    for r in spawned:
        assert got[(r["conversation"], 1)].arrived_ns >= got[tuple(r["spawned_by"])].ended_ns
    for r in joining:
        for child in r["joins"]:
            assert got[(r["conversation"], r["turn"])].arrived_ns >= got[(child, last[child])].ended_ns
