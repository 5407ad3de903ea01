"""A streaming engine whose /health is starved is not dead; one that stops is. The engine's last progress is
never moved back by a metrics scrape a busy engine answered late."""

from __future__ import annotations

import asyncio
import sys

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.load.client import Client, ClientConfig
from loadrepro.load.run_target import RunTarget
from loadrepro.load.runner import Runner
from loadrepro.records import MetricsSample
from loadrepro.workload.model import Workload
from tests.helpers import cli, rule
from tests.starved_server import StarvedServer, report_of

LOAD = ["workload.conversations=4", "workload.turns=1", "workload.prefix_tokens=300", "workload.max_tokens=100",
        "load.concurrency=4", "load.ttft_timeout_s=1.5", "load.stall_timeout_s=30", "watch.health_timeout_s=0.25",
        "watch.health_interval_s=0.25", "watch.metrics_interval_s=0.25", "model='stub'"]


def _run(url, out):
    sets = [arg for key in LOAD for arg in ("--set", key)]
    return cli("run", "--profile", "quickstart", "--base-url", url,
                           "--out", str(out), "--quiet", *sets)


def test_health_starved_while_a_stream_flows_is_not_engine_death(tmp_path):
    server = StarvedServer(token_s=0.05)
    with server.running() as url:
        done = _run(url, tmp_path / "run")
    report = report_of(tmp_path / "run")
    assert done.returncode in (0, 1), done.stderr
    polls = report["health"]
    assert any(t["status"] == "unreachable" for t in polls["transitions"]), polls  # /health was starved
    assert report["requests"]["by_outcome"].get("ok") == 1 and report["requests"]["by_outcome"].get("timeout") == 3
    assert not rule(report, "engine_death")["fired"], rule(report, "engine_death")
    assert report["stop_reason"] == "done"


def test_an_engine_that_stops_streaming_and_answering_is_engine_death(tmp_path):
    server = StarvedServer(token_s=0.05, die_after_s=2.0)
    with server.running() as url:
        done = _run(url, tmp_path / "run")
    report = report_of(tmp_path / "run")
    assert done.returncode == 1, done.stderr
    death = rule(report, "engine_death")
    assert death["fired"] and death["facts"]["health_status"] == "unreachable", death
    assert death["facts"]["health_after"] == "down", death
    # not while it still streamed (its /health starved since the load began)
    assert death["facts"]["t_s"] >= 1.95, death


def test_a_late_metrics_scrape_does_not_move_the_last_progress_back(tmp_path):
    profile = load_profile("quickstart")
    client = Client(ClientConfig("http://127.0.0.1:9", "chat", "stub", 1, 10, 10))
    runner = Runner(profile, Workload("conversations", "chat", 7, "x", "x", ()), client,
                    RunTarget("http://127.0.0.1:9", "stub", "test"), tmp_path)
    runner._on_sample(MetricsSample(1_000, {"kv_usage": 1.0}))
    client.activity.last_ns = 5_000  # a token came at 5 us
    runner._on_sample(MetricsSample(2_000, {"kv_usage": 0.0}))  # a scrape sent at 2 us, answered after it, moved
    assert client.activity.last_ns == 5_000
    runner._on_sample(MetricsSample(9_000, {"kv_usage": 1.0}))  # one sent after the token, moved: progress then
    assert client.activity.last_ns == 9_000


MANAGED = ["load.duration_s=10", "load.concurrency=1", "workload.conversations=4", "workload.turns=1",
           "workload.prefix_tokens=300", "workload.max_tokens=20", "load.stall_timeout_s=3",
           "watch.health_timeout_s=0.25", "watch.health_interval_s=0.25", "watch.metrics_interval_s=0.25",
           "model='stub'"]


def _managed(tmp_path, *options):
    engine = f"{sys.executable} -m tests.starved_server --port {{port}} {' '.join(options)}"
    sets = [arg for key in MANAGED for arg in ("--set", key)]
    done = cli("run", "--profile", "quickstart", "--engine-cmd", engine,
                           "--out", str(tmp_path / "run"), "--quiet", *sets)
    return done, report_of(tmp_path / "run")


@pytest.mark.slow
def test_a_managed_engine_whose_process_runs_is_not_dead_while_its_frontend_is_unresponsive(tmp_path):
    """No progress and /health unanswered for 5 s, the process alive: a stall and an unresponsive frontend, then
    the engine goes on. Without the process to go by (the same server at a URL), that is judged as death."""
    done, report = _managed(tmp_path, "--freeze-after", "1", "--freeze", "5")
    assert done.returncode == 1, done.stderr
    assert not rule(report, "engine_death")["fired"], rule(report, "engine_death")
    assert report["stop_reason"] == "duration"  # not stopped as dead
    words = rule(report, "frontend_unresponsive")
    assert words["fired"] and words["facts"]["polls"] >= 2, words
    assert rule(report, "stalled_streams")["fired"]
    assert report["requests"]["by_outcome"].get("ok", 0) >= 2  # it went on after the freeze


def test_a_managed_engine_whose_process_exits_is_dead(tmp_path):
    done, report = _managed(tmp_path, "--exit-after", "1.5")
    assert done.returncode == 1, done.stderr
    death = rule(report, "engine_death")
    assert death["fired"] and death["facts"]["judged_by"] == "engine", death
    assert "exited with code 1" in death["detail"], death  # the runner's note: the process's own exit status
    assert not rule(report, "frontend_unresponsive")["fired"]


@pytest.mark.slow
def test_a_managed_engine_whose_frontend_is_still_unresponsive_when_the_run_ends_is_not_dead(tmp_path):
    """llama.cpp's one slot held by a request loadrepro had cancelled: /health unanswered past the run's end while
    its process lived. Unresponsive, never dead: engine_death does not fire, and the post-run rule says the process
    still ran."""
    done, report = _managed(tmp_path, "--freeze-after", "1", "--freeze", "60")
    assert done.returncode == 1, done.stderr
    assert report["health"]["post"] == "unreachable" and report["stop_reason"] == "duration", report["health"]
    assert not rule(report, "engine_death")["fired"], rule(report, "engine_death")
    post = rule(report, "post_run_health")
    assert post["fired"] and post["facts"] == {"status": "unreachable", "process_ran": 1}, post


async def test_one_unanswered_post_run_poll_is_asked_again_and_the_second_answer_is_the_last_word(tmp_path):
    """For an engine at a URL, whose process loadrepro cannot see: one hung poll of a busy engine is not its death,
    so an unanswered post-run poll is asked once more a poll interval later; an answer other than silence is
    taken as it is."""
    from loadrepro.records import HealthSample

    class Polls:
        def __init__(self, *statuses):
            self.statuses, self.asked = list(statuses), 0

        async def poll(self):
            self.asked += 1
            return HealthSample(self.asked, self.statuses.pop(0), 1)

    from loadrepro.load.after_load import last_health

    interrupted = asyncio.Event()

    async def post(polls):
        return await last_health(polls, interrupted, 0.05, lambda: False)

    hung_once = Polls("unreachable", 200)
    assert (await post(hung_once)).status == 200 and hung_once.asked == 2
    refused = Polls(503, 200)
    assert (await post(refused)).status == 503 and refused.asked == 1
    interrupted.set()
    stopped = Polls("unreachable", 200)
    assert (await post(stopped)).status == "unreachable" and stopped.asked == 1
    exited = Polls("unreachable", 200)
    interrupted.clear()
    assert (await last_health(exited, interrupted, 0.05, lambda: True)).status == "unreachable" and exited.asked == 1
