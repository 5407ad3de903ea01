"""Through an authenticating gateway: every request carries the key (lengths counted right), a refusal for
authentication is an error that says so, and the engine dying behind a gateway whose /health stays 200 is judged
as the engine's death and stops the run. The gateway is the test's own (tests/gateway_server.py); the engine
behind it a simulated one in its own process, killed by PID."""

import asyncio
import os
import signal

import pytest

import loadrepro
from loadrepro.config.profile import SimSpec
from loadrepro.errors import TargetRefused
from loadrepro.load.engine import ManagedEngine
from loadrepro.sim.process import sim_engine_command
from tests.gateway_server import Gateway

KEY = "sk-gateway-test-0123456789"
SMALL = ["workload.conversations=4", "workload.turns=2", "workload.prefix_tokens=400", "workload.max_tokens=16",
         "verdict.min_cache_hit=0", "watch.metrics_path=''", "watch.health_interval_s=0.5"]


@pytest.fixture
def engine(tmp_path):
    managed = ManagedEngine(sim_engine_command(SimSpec(scenario="healthy", step_s=0.01)), tmp_path / "engine.log")
    managed.start(30)
    yield managed
    managed.stop()


def test_every_request_through_a_keyed_gateway_carries_the_key(tmp_path, engine, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with Gateway(engine.url, KEY).running() as gateway:
        report = loadrepro.run("healthy", base_url=gateway.url, out=tmp_path / "run", overrides=SMALL)
    assert report.passed, report
    assert gateway.refused == 0 and "/tokenize" in gateway.paths and "/health" in gateway.paths
    assert report.health.path == "/health" and report.health.owner is None  # not a gateway loadrepro knows
    assert report.calibration.source == "POST /tokenize (vLLM)"
    assert report.lengths.error_max < 0.05  # counted in the engine's own tokens, through the gateway
    assert KEY not in (tmp_path / "run" / "report.json").read_text()


@pytest.mark.parametrize("model,what", [("", "listing its models"), ("'loadrepro-sim'", "to count tokens")])
def test_a_gateway_refusing_for_authentication_is_an_error_naming_the_cause(tmp_path, engine, monkeypatch, model,
                                                                            what):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with Gateway(engine.url, KEY).running() as gateway:
        with pytest.raises(TargetRefused) as refused:
            loadrepro.run("healthy", base_url=gateway.url, out=tmp_path / "run", overrides=[*SMALL, f"model={model}"])
    assert f"refused {what}" in str(refused.value) and "for authentication (HTTP 401" in str(refused.value)
    assert "OPENAI_API_KEY" in str(refused.value)


def test_the_engine_dying_behind_a_gateway_is_its_death_and_stops_the_run(tmp_path, engine, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    kill = lambda: os.kill(engine.pid, signal.SIGKILL)  # noqa: E731 - the engine this test started
    with Gateway(engine.url, KEY, kill_upstream_after=6, on_kill=kill).running() as gateway:
        report = loadrepro.run("healthy", base_url=gateway.url, out=tmp_path / "run",
                               overrides=[*SMALL, "load.duration_s=60", "load.concurrency=2", "load.max_rps=20"])
    rules = {r.name: r.detail for r in report.rules if r.fired}
    assert report.stop_reason == "engine_death", report  # then, not at the soak's end
    assert "every request since then failed with the gateway's `gateway-upstream-connection` (4 in a row) and " \
           "none succeeded; /health still answers 200, so it belongs to the gateway" in rules["engine_death"]
    assert report.health.transitions[-1].status == 200 and gateway.forwarded >= 10



def test_a_managed_engine_that_wants_a_key_is_asked_with_it_whether_it_is_up(tmp_path, engine):
    with Gateway(engine.url, KEY).running() as gateway:
        keyed = ManagedEngine("unused {port}", tmp_path / "log", api_key=KEY)
        bare = ManagedEngine("unused {port}", tmp_path / "log")
        keyed.url = bare.url = gateway.url  # the gateway stands in for an engine loadrepro started
        assert keyed._healthy() and not bare._healthy()
    assert gateway.refused == 1


def test_a_proxy_refusing_to_come_back_later_is_throttling_not_the_engines_death(tmp_path, engine, monkeypatch):
    """nginx's 503 page with Retry-After for every request past a rate limit, the engine behind it idle: throttled
    requests, whatever page they carried, are not the upstream gone."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with Gateway(engine.url, KEY, throttle_after=4).running() as gateway:
        report = loadrepro.run("healthy", base_url=gateway.url, out=tmp_path / "run",
                               overrides=[*SMALL, "load.duration_s=4", "load.concurrency=2", "load.max_rps=10",
                                          "load.max_retries=0"])
    rules = {r.name: r.detail for r in report.rules if r.fired}
    assert report.stop_reason == "duration" and "engine_death" not in rules, report
    assert report.requests.by_outcome.get("throttled", 0) >= 4 and "throttling" in rules


def test_a_litellm_gateways_health_that_calls_the_model_is_not_polled_and_the_report_says_whose_health_it_is(
        tmp_path, engine, monkeypatch):
    """LiteLLM's /health makes a model call on every poll: loadrepro polls its /health/liveliness instead, says so,
    and the report's health section says the health is the gateway's; the engine behind it is never called by a
    health poll."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with Gateway(engine.url, KEY, litellm=True).running() as gateway:
        report = loadrepro.run("healthy", base_url=gateway.url, out=tmp_path / "run", overrides=SMALL)
    assert report.passed, report
    assert gateway.health_model_calls == 0 and "/health" not in gateway.paths, gateway.paths
    assert gateway.paths.count("/health/liveliness") >= 3
    assert report.health.path == "/health/liveliness"
    assert report.health.owner and "belongs to the LiteLLM gateway (GET /health/readiness says litellm_version " \
        "'1.108.7'), not to the engine behind it" in report.health.owner
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "The health path /health/liveliness belongs to the LiteLLM gateway" in markdown
    assert any("/health/liveliness is polled instead" in n for n in report.notes), report.notes


def test_probe_recognises_a_litellm_gateway_and_says_which_health_path_a_run_polls(engine, monkeypatch):
    from loadrepro.load.probe import probe

    with Gateway(engine.url, KEY, litellm=True).running() as gateway:
        found = asyncio.run(probe(gateway.url, api_key=KEY))
    assert gateway.health_model_calls == 0 and "/health" not in gateway.paths, gateway.paths
    assert found.health.path == "/health/liveliness" and found.health.status == 200
    assert any("LiteLLM gateway answers: GET /health/readiness says litellm_version" in e for e in found.evidence)
    assert any("its /health calls every model behind it on each poll" in line for line in found.plan), found.plan
