"""The runner against real sockets: concurrency caps, arrivals, soak cancellation, stops and persistence."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from loadrepro.config.profile import VerdictSpec
from loadrepro.config.profile_files import load_profile
from loadrepro.judge.classify import engine_death
from loadrepro.load.client import Client, ClientConfig
from loadrepro.load.engine import ManagedEngine
from loadrepro.load.run_target import RunTarget
from loadrepro.load.runner import Runner
from loadrepro.records import Outcome, RequestRecord, read_jsonl
from loadrepro.sim.process import sim_engine_command
from loadrepro.workload.plan import plan_workload
from loadrepro.workload.tokens import SimTokenCounter
from tests.helpers import cli, until
from tests.stub_server import StubServer, wait_until

SMALL = ["workload.prefix_tokens=200", "workload.turn_tokens=20", "workload.max_tokens=8", "watch.metrics_path=''",
         "watch.health_interval_s=0.1"]


def run(url: str, tmp_path, *overrides: str, engine_exit=None, engine_log=None):
    profile = load_profile("quickstart", [*SMALL, *overrides])

    async def go():
        plan = await plan_workload(profile, SimTokenCounter())
        config = ClientConfig(url, profile.api, "stub", profile.load.concurrency, profile.load.request_timeout_s,
                              profile.load.stall_timeout_s)
        async with Client(config) as client:
            target = RunTarget(url, "stub", "test", engine_exit=engine_exit, engine_log=engine_log)
            return await Runner(profile, plan.workload, client, target, tmp_path).run()

    return asyncio.run(go())


@pytest.mark.parametrize("arrival", [
    ["load.arrival='closed'"],
    ["load.arrival='poisson'", "load.rate=200"],
    ["load.duration_s=1.5"],
])
def test_the_concurrency_cap_holds_server_side(tmp_path, arrival):
    with StubServer("ok", tokens=6, token_delay_s=0.02).running() as server:
        result = run(server.url, tmp_path, "workload.conversations=12", "load.concurrency=4", *arrival)
        assert server.stats.max_in_flight == 4
    assert result.records and all(r.outcome is Outcome.OK for r in result.records)
    if "load.duration_s=1.5" in arrival:
        assert result.stop_reason == "duration" and len(result.records) > 24  # conversations were cycled
    else:
        assert len(result.records) == 24 and result.stop_reason == "done"


def test_latency_includes_time_queued_for_a_slot(tmp_path):
    with StubServer("ok", tokens=4, token_delay_s=0.05).running() as server:
        result = run(server.url, tmp_path, "workload.conversations=4", "workload.turns=1", "load.concurrency=1")
    waits = sorted(r.sent_ns - r.queued_ns for r in result.records)
    assert waits[-1] > 3 * 0.15e9  # the last one waited for three others


def test_soak_cancels_the_chosen_share_and_the_server_sees_each_disconnect(tmp_path):
    with StubServer("ok", tokens=40, token_delay_s=0.01).running() as server:
        result = run(server.url, tmp_path, "workload.conversations=4", "workload.max_tokens=40",
                     "load.concurrency=4", "load.duration_s=1.5", "load.cancel_fraction=0.5")
        cancelled = [r for r in result.records if r.outcome is Outcome.CANCELLED]
        # the server sees a disconnect when its next write fails
        assert wait_until(server.stats, lambda: server.stats.disconnects >= len(cancelled) - 1)
        assert cancelled
    share = len(cancelled) / len(result.records)
    assert 0.2 < share < 0.8


def test_a_hanging_server_ends_the_run_within_the_stall_timeout(tmp_path):
    """Stalled, not timed out: each request ended by the stall timeout (1 s), not the request's (ten times longer),
    and not before a whole second of silence."""
    with StubServer("hang").running() as server:
        result = run(server.url, tmp_path, "workload.conversations=3", "load.stall_timeout_s=1",
                     "load.request_timeout_s=10")
    assert all(r.outcome is Outcome.STALLED for r in result.records) and len(result.records) == 3
    assert all(r.end_ns - r.first_byte_ns >= 1e9 for r in result.records)


def test_health_flipping_to_503_while_requests_fail_is_engine_death(tmp_path):
    """A soak keeps sending while /health answers 503 and every request fails with a 500: the runner judges the
    engine dead and stops the soak then, not at its end."""
    with StubServer("health_flip", tokens=4, token_delay_s=0.05, flip_after_polls=3).running() as server:
        result = run(server.url, tmp_path, "workload.conversations=2", "load.concurrency=2", "load.duration_s=30")
    assert result.stop_reason == "engine_death"  # then, not at the soak's end (30 s)
    death = next(n.text for n in result.notes if n.source == "death")
    assert death == "/health answered 503 2 times in a row while requests failed and the engine made no progress"
    assert [h.status for h in result.health][:2] == [200, 200] and 503 in [h.status for h in result.health]
    assert any(r.outcome is Outcome.SERVER_ERROR for r in result.records)
    assert result.post_health.status == 503
    assert engine_death(result, VerdictSpec()) is not None


def test_an_engine_process_that_exits_mid_run_is_engine_death(tmp_path):
    profile = load_profile("healthy", ["sim.step_s=0.02"])
    engine = ManagedEngine(sim_engine_command(profile.sim), tmp_path / "engine.log")
    url = engine.start(30)
    try:
        async def killer():  # once the load is under way: its first request has ended
            written = tmp_path / "requests.jsonl"
            deadline = time.monotonic() + 20
            while not (written.exists() and written.stat().st_size):
                assert time.monotonic() < deadline, "the load never got under way: nothing to kill the engine in"
                await asyncio.sleep(0.02)
            os.kill(engine.pid, signal.SIGKILL)

        async def go():
            plan = await plan_workload(profile, SimTokenCounter())
            config = ClientConfig(url, "chat", "loadrepro-sim", 4, 30, 5)
            async with Client(config) as client:
                target = RunTarget(url, "loadrepro-sim", "t", engine_exit=engine.exit_code)
                kill = asyncio.create_task(killer())
                result = await Runner(profile, plan.workload, client, target, tmp_path).run()
                await kill
                return result

        result = asyncio.run(go())
    finally:
        engine.stop()
    assert result.stop_reason == "engine_death"
    assert any(n.text == "the engine process killed by SIGKILL" for n in result.notes)
    failed = [r for r in result.records if r.outcome is not Outcome.OK]
    assert failed and {r.outcome for r in failed} <= {Outcome.TRUNCATED, Outcome.UNREACHABLE, Outcome.CANCELLED}


def test_trace_replay_follows_the_timestamps(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": 300, "output_length": 4,
                                         "hash_ids": [1]}) + "\n" for t in (0, 400, 800)))
    with StubServer("ok", tokens=4).running() as server:
        result = run(server.url, tmp_path, "workload.kind='trace'", f"workload.trace='{trace}'")
    offsets = sorted((r.queued_ns - result.start_ns) / 1e9 for r in result.records)
    assert offsets == pytest.approx([0, 0.4, 0.8], abs=0.15)


def test_every_record_is_in_requests_jsonl(tmp_path):
    with StubServer("ok").running() as server:
        result = run(server.url, tmp_path, "workload.conversations=3")
    written = [RequestRecord.from_json(line) for line in read_jsonl(tmp_path / "requests.jsonl")]
    assert written == list(result.records)
    kinds = {line["kind"] for line in read_jsonl(tmp_path / "samples.jsonl")}
    assert "health" in kinds


def test_ctrl_c_mid_run_leaves_a_complete_requests_jsonl(tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "loadrepro", "run", "--profile", "healthy", "--out", str(out), "--quiet",
         "--set", "sim.step_s=0.05", "--set", "workload.max_tokens=200"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        path = out / "requests.jsonl"
        until(lambda: path.exists() and len(path.read_text().splitlines()) >= 4, 30, "four records written")
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    lines = (out / "requests.jsonl").read_text().splitlines()
    records = [RequestRecord.from_json(json.loads(line)) for line in lines]
    assert len({r.id for r in records}) == len(records) == max(r.id for r in records)  # none missing
    assert any(r.outcome is Outcome.CANCELLED for r in records)
    assert "the run was interrupted" in stdout
    port = json.loads((out / "report.json").read_text())["target"]["base_url"].rsplit(":", 1)[1]
    listing = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"--port {port}" not in listing  # the simulated engine the run started is gone


async def test_a_log_followed_from_its_end_counts_old_lines_but_matches_only_new_ones(tmp_path):
    from loadrepro.load.watch.logs import LogWatcher

    log = tmp_path / "engine.log"
    log.write_text("Available blocks exhausted (an old line)\n" * 3)
    seen = []
    watcher = LogWatcher(log, seen.append)
    await watcher.start()
    watcher.read_new()
    assert seen == []
    with log.open("a") as handle:
        handle.write("[E] Available blocks exhausted\n")
    watcher.read_new()
    assert [(m.line_number, m.signature) for m in seen] == [(4, "trtllm-blocks-exhausted")]


def test_an_engine_log_that_cannot_be_read_is_said_once_and_one_that_never_appears_is_said(tmp_path):
    import loadrepro

    small = ["workload.conversations=2", "workload.turns=1", "workload.prefix_tokens=200", "workload.max_tokens=4"]
    unreadable = loadrepro.run("healthy", out=tmp_path / "dir", overrides=[*small, f"watch.engine_log='{tmp_path}'"])
    said = [n for n in unreadable.notes if n.startswith("engine log:")]
    assert len(said) == 1 and "IsADirectoryError" in said[0], unreadable.notes
    assert (tmp_path / "dir" / "report.md").read_text().count("the engine log watcher stopped") == 1
    missing = loadrepro.run("healthy", out=tmp_path / "missing",
                            overrides=[*small, f"watch.engine_log='{tmp_path / 'none.log'}'"])
    assert f"engine log: {tmp_path / 'none.log'} never appeared, so no error signature was read from it" in \
        missing.notes


def test_a_dead_engines_metrics_are_scraped_once_after_the_load_not_waited_on(tmp_path):
    """The quick start's stock engine dies at once; its frozen metrics say requests run, which after a death is
    not a zombie: one scrape after the load, not 5 s of them."""
    out = tmp_path / "run"
    done = cli("run", "--profile", "quickstart", "--out", str(out),
                           "--quiet")
    assert done.returncode == 1, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert next(r for r in report["rules"] if r["name"] == "engine_death")["fired"]
    last_end = max(r["end_ns"] for r in read_jsonl(out / "requests.jsonl"))
    after = [s for s in read_jsonl(out / "samples.jsonl") if s["kind"] == "metrics" and s["t_ns"] > last_end]
    assert len(after) <= 3, len(after)  # the settle scrape, and the periodic ones already under way
