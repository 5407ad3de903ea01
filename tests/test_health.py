"""A slow /health is an answer: servers whose /health answers late, always or only under load, pass with the
latency reported; death is judged from slow answers as from fast ones; a liveness probe's judgement is reported
as an orchestrator would make it. Each against a test server over real HTTP, through the real client."""

import json
from pathlib import Path

import pytest

import loadrepro
from tests.helpers import facts, fired
from tests.stub_server import StubServer

SMALL = ["workload.turns=1", "workload.prefix_tokens=200", "workload.max_tokens=8", "workload.warm_max_tokens=8",
         "verdict.min_cache_hit=0", "model='stub'", "watch.health_interval_s=0.5", "load.stall_timeout_s=30"]


def run(url: str, out: Path, *extra: str):
    return loadrepro.run("healthy", base_url=url, out=out, overrides=[*SMALL, *extra])


@pytest.mark.slow
def test_a_health_endpoint_that_answers_in_two_and_a_half_seconds_is_healthy(tmp_path):
    with StubServer("ok", tokens=10, token_delay_s=0.1, health_delay_s=2.5).running() as stub:
        report = run(stub.url, tmp_path, "workload.conversations=12", "load.concurrency=12")
    assert report.passed, report
    assert report.health.pre == 200 and report.health.post == 200
    assert report.health.latency_ms.p50 >= 2400 and report.health.slow == 0
    assert report.requests.by_outcome == {"ok": 12}
    assert "health_latency" not in fired(report)
    assert "/health answered in p50 2,5" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_the_same_slow_health_endpoint_turning_503_is_engine_death(tmp_path):
    with StubServer("ok", tokens=5, token_delay_s=0.1, health_delay_s=2.5, die_after=4).running() as stub:
        report = run(stub.url, tmp_path, "workload.conversations=6", "load.concurrency=2", "load.duration_s=30",
                     "load.max_rps=10")
    rules = fired(report)
    assert not report.passed and report.stop_reason == "engine_death", report
    # judged while the load went on, from /health, and stopped then, not at the soak's end
    assert facts(report, "engine_death")["judged_by"] == "death", rules


@pytest.mark.parametrize("busy_s,restarts", [(1.6, True), (0.3, False)])
def test_liveness_fires_on_a_health_endpoint_slower_than_its_timeout_under_load(tmp_path, busy_s, restarts):
    with StubServer("ok", tokens=40, token_delay_s=0.15, busy_health_delay_s=busy_s).running() as stub:
        report = run(stub.url, tmp_path, "workload.conversations=12", "load.concurrency=12",
                     "watch.liveness_period_s=0.5")
    rules = fired(report)
    assert report.passed and report.requests.by_outcome == {"ok": 12}, report  # slow /health, no death
    assert ("liveness" in rules) is restarts, rules
    assert report.liveness.timeout_s == 1.0 and report.liveness.failures == 3
    if restarts:
        assert "a liveness probe with timeout 1 s, period 0.5 s and 3 failures would have restarted this engine" \
            in rules["liveness"]
        assert report.liveness.would_restart_at_s is not None
    else:
        assert report.liveness.would_restart_at_s is None


def test_max_health_latency_makes_slowness_a_failure(tmp_path):
    with StubServer("ok", tokens=4, token_delay_s=0.05, health_delay_s=0.6).running() as stub:
        report = run(stub.url, tmp_path, "workload.conversations=2", "load.concurrency=2",
                     "verdict.max_health_latency_s=0.4")
    assert not report.passed
    assert fired(report)["health_latency"].startswith("/health answered slower than max_health_latency_s (0.4 s)")


def _start_ns(run_dir: Path) -> int:
    samples = (json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines())
    return next(s["t_ns"] for s in samples if s["kind"] == "note" and s["source"] == "run")


def test_canaries_make_an_engine_wedged_while_healthy_explicit_with_when_it_began(tmp_path):
    with StubServer("ok", tokens=4, token_delay_s=0.05, wedge_after=3).running() as stub:
        report = run(stub.url, tmp_path, "workload.conversations=4", "workload.turns=2", "load.concurrency=2",
                     "load.stall_timeout_s=2", "watch.canary_interval_s=0.5", "watch.health_interval_s=0.2")
        last_token_ns = stub.last_token_sent_ns
    rules = fired(report)
    assert not report.passed and report.requests.by_outcome.get("stalled"), report
    wedged = rules["wedged_while_healthy"]
    began_s = float(wedged.split("no token on any stream since ")[1].split(" s")[0])
    assert abs(began_s - (last_token_ns - _start_ns(tmp_path)) / 1e9) < 0.1, wedged
    assert report.canary.sent >= 2 and report.canary.by_outcome.get("stalled"), report.canary
    assert report.health.transitions[-1].status == 200  # /health said 200 throughout


def test_canaries_on_healthy_and_on_queueing_engines_are_answered(tmp_path):
    for behaviour in ("ok", "queue"):
        with StubServer(behaviour, tokens=6, token_delay_s=0.05).running() as stub:
            report = run(stub.url, tmp_path / behaviour, "workload.conversations=4", "load.concurrency=4",
                         "watch.canary_interval_s=0.3")
        assert report.passed, report
        assert "wedged_while_healthy" not in fired(report)
        assert report.canary.sent >= 1 and report.canary.ok == report.canary.sent
        assert report.canary.ttft_ms.p50 is not None
        assert report.requests.total == 4  # canaries are not the workload's requests


def test_the_reports_name_the_health_path_that_was_polled(tmp_path, pictures):
    with StubServer("ok", tokens=4).running() as stub:
        report = run(stub.url, tmp_path, "workload.conversations=2", "load.concurrency=2",
                     "watch.health_path='/health/liveliness'")
    assert report.health.path == "/health/liveliness"
    markdown = (tmp_path / "report.md").read_text()
    assert "| t (s) | /health/liveliness |" in markdown and "/health/liveliness answered in p50" in markdown
    assert '"health_path":"/health/liveliness"' in (tmp_path / "report.html").read_text()  # its panel's title


def test_a_health_path_not_polled_is_said_so_not_as_none(tmp_path):
    with StubServer("ok", tokens=4).running() as stub:
        report = run(stub.url, tmp_path, "workload.conversations=2", "watch.health_path=''")
    assert report.health.pre is None and report.health.post is None and report.health.transitions == []
    markdown = (tmp_path / "report.md").read_text()
    assert "Before the run: not polled; after the run: not polled." in markdown and "None" not in markdown
