"""Two real llama.cpp servers as replicas of one model: the load spread over them passes with both replicas'
figures; one SIGKILLed mid-run fails replica_death naming it while the other's requests complete and the run goes
on; session routing keeps every turn of a conversation on one replica, where its prefix is found cached."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import defaultdict
from pathlib import Path

import pytest

from loadrepro.load.engine import ManagedEngine
from tests.engines.conftest import loadrepro
from tests.engines.test_llamacpp import command, report

pytestmark = [pytest.mark.engine, pytest.mark.timeout(3600)]

PROFILE = """
name = "llamacpp-replicas"
api = "chat"
[workload]
seed = 11
conversations = {conversations}
turns = {turns}
prefix_tokens = 200
prefix_tokens_p95 = 0
turn_tokens = 40
max_tokens = 16
[load]
concurrency = 4
request_timeout_s = 120
stall_timeout_s = 30
[target]
routing = "{routing}"
"""


def profile(tmp_path: Path, conversations: int, turns: int = 1, routing: str = "round_robin") -> str:
    path = tmp_path / f"replicas-{conversations}-{turns}-{routing}.toml"
    path.write_text(PROFILE.format(conversations=conversations, turns=turns, routing=routing))
    return str(path)


def replicas(gguf: Path, tmp_path: Path, count: int = 2) -> list[ManagedEngine]:
    engines = [ManagedEngine(command(gguf, "-c", "4096", "-np", "2"), tmp_path / f"replica-{i}.log")
               for i in range(count)]
    for engine in engines:
        engine.start(timeout_s=180)
    return engines


def urls(engines: list[ManagedEngine]) -> list[str]:
    return [arg for engine in engines for arg in ("--base-url", engine.url)]


def records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind", "request") == "request"]


def test_two_replicas_pass_and_one_killed_mid_run_fails_replica_death(gguf_26m, tmp_path):
    engines = replicas(gguf_26m, tmp_path)
    try:
        done = loadrepro("run", "--profile", profile(tmp_path, 200), "--out", str(tmp_path / "both"), "--quiet",
                         *urls(engines))
        assert done.returncode == 0, done.stdout + done.stderr
        both = report(tmp_path / "both")
        first, second = both["endpoints"]
        assert (first["by_outcome"], second["by_outcome"]) == ({"ok": 100}, {"ok": 100}), both["endpoints"]
        print("both replicas:", json.dumps(both["endpoints"]))

        killed, done_event = threading.Event(), threading.Event()

        def kill_when_serving() -> None:
            """SIGKILL replica-1 once the run's records show it served 20 requests (bounded: 10 minutes)."""
            log = tmp_path / "killed" / "requests.jsonl"
            for _ in range(6000):
                if log.exists() and sum(1 for r in _lines(log) if r.get("replica") == 1) >= 20:
                    asyncio.run(engines[1].kill())
                    killed.set()
                    return
                if done_event.wait(0.1):
                    return

        killer = threading.Thread(target=kill_when_serving, daemon=True)
        killer.start()
        try:
            done = loadrepro("run", "--profile", profile(tmp_path, 200), "--out", str(tmp_path / "killed"),
                             "--quiet", *urls(engines))
        finally:
            done_event.set()
            killer.join()
        assert killed.is_set(), "replica-1 was not killed while the run went on"
        assert done.returncode == 1, done.stdout + done.stderr
        r = report(tmp_path / "killed")
        found = next(x for x in r["rules"] if x["name"] == "replica_death")
        assert found["fired"] and found["detail"].startswith(f"replica-1 ({engines[1].url}) died at "), found
        first, second = r["endpoints"]
        assert first["by_outcome"] == {"ok": 100} and first["died_at_s"] is None, r["endpoints"]
        assert second["died_at_s"] is not None and r["requests"]["total"] == 200, r["endpoints"]
        assert r["stop_reason"] == "done"  # the run went on to its last request
        print("one killed:", found["detail"])
    finally:
        for engine in engines:
            engine.stop()


def _lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # the line being written
            pass
    return out


def test_session_routing_keeps_a_conversation_on_one_replica_and_its_prefix_cached(gguf_26m, tmp_path):
    engines = replicas(gguf_26m, tmp_path)
    try:
        done = loadrepro("run", "--profile", profile(tmp_path, 8, 3, "session"), "--out", str(tmp_path / "session"),
                         "--quiet", *urls(engines))
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        for engine in engines:
            engine.stop()
    where: dict[int, set[int]] = defaultdict(set)
    cached = []
    for r in records(tmp_path / "session"):
        where[r["conversation"]].add(r["replica"])
        if r["turn"] > 1:
            cached.append(r["cached_tokens"] or 0)
    assert len(where) == 8 and all(len(s) == 1 for s in where.values()), where
    assert {next(iter(s)) for s in where.values()} == {0, 1}
    assert cached and min(cached) > 0, cached  # every later turn found its conversation's prefix where it went
    print(f"session routing: later turns' cached tokens {cached}")
