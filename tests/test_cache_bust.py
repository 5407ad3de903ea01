"""[workload] cache_bust = "tree": every request of a tree starts with one marker, the run's and the tree's own, so
that two runs share no prefix and a tree's requests still share theirs; none without it."""

from __future__ import annotations

import json
import os
import re

from tests.helpers import cli
from tests.test_agent_sessions import SMALL
from tests.trace_server import TraceServer

MARK = re.compile(r"^\[rid:([0-9a-f]{12})\]\n\n")


def _sent(tmp_path, name, *more):
    server = TraceServer(answer_s=0.0)
    overrides = [f for o in (*SMALL, "workload.agents.context_limit_tokens=0", *more) for f in ("--set", o)]
    with server.running() as url:
        done = cli("run", "--profile", "agents-draft-pool", "--base-url", url, *overrides, "--out",
                   str(tmp_path / name), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    return server.received


def test_each_tree_and_each_run_gets_a_marker_of_its_own(tmp_path):
    first, second = (_sent(tmp_path, name, "workload.cache_bust='tree'") for name in ("one", "two"))
    marks = [{MARK.match(g.body["messages"][0]["content"]).group(1) for g in run} for run in (first, second)]
    assert len(marks[0]) == len(marks[1]) == 2  # two agent trees, each its subagents' marker too
    assert marks[0].isdisjoint(marks[1])  # another run, other markers
    by_mark: dict[str, list] = {}
    for g in first:
        by_mark.setdefault(MARK.match(g.body["messages"][0]["content"]).group(1), []).append(g)
    for tree in by_mark.values():  # within a tree the shared prompt is shared: the marker, then the same text
        prefix = os.path.commonprefix([g.body["messages"][0]["content"] for g in tree])
        assert len(prefix) > 64


def test_without_it_no_request_is_marked(tmp_path):
    assert not any(MARK.match(g.body["messages"][0]["content"]) for g in _sent(tmp_path, "plain"))
    report = json.loads((tmp_path / "plain" / "report.json").read_text())
    assert report["verdict"] == "pass"
