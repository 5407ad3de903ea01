"""[[watch.endpoints]]: another process of the deployment polled beside the target. One whose /health turns 503
and stays so while the target answers is the deployment's death, named (endpoint_death); one that stays 200 is
not; one down a while and back is said, not failed."""

from __future__ import annotations

import loadrepro
from tests.helpers import rebuilt_alike, rule
from tests.pool_server import PoolServer
from tests.stub_server import StubServer

PROFILE = """
name = "watched"
api = "chat"
[workload]
seed = 2
conversations = 30
turns = 1
prefix_tokens = 300
max_tokens = 8
[load]
arrival = "poisson"
rate = 8.0
concurrency = 4
duration_s = 4
request_timeout_s = 20
stall_timeout_s = 10
[watch]
metrics_path = ""
health_interval_s = 0.2
metrics_interval_s = 0.2
[[watch.endpoints]]
name = "decode-0"
health_url = "{url}/health"
metrics_url = "{url}/metrics"
"""


def run(tmp_path, tokenizer_dir, pool: PoolServer):
    with StubServer(tokens=8, token_delay_s=0.01).running() as target, pool.running():
        path = tmp_path / "watched.toml"
        path.write_text(PROFILE.format(url=pool.url))
        return loadrepro.run(path, base_url=target.url, tokenizer=tokenizer_dir, out=tmp_path / "run")


def test_a_pool_dead_behind_a_target_that_answers_is_the_deployments_death(tmp_path, tokenizer_dir):
    report = run(tmp_path, tokenizer_dir, PoolServer(ok_polls=5))
    found = rule(report, "endpoint_death")
    assert not report.passed and found.fired and found.severity == "fail", report.reasons
    assert found.detail.startswith("decode-0 died at ") and "HTTP 503" in found.detail
    assert found.facts["endpoint"] == "decode-0" and found.facts["target_answered"] == 1, found.facts
    watched = report.watched_endpoints[0]
    assert watched.name == "decode-0" and watched.died_at_s is not None and watched.not_ok >= 2
    assert watched.kv_usage_peak == 0.42 and watched.waiting_peak == 3
    assert "Watched decode-0" in (tmp_path / "run" / "report.md").read_text()
    rebuilt_alike(tmp_path / "run")


def test_a_pool_that_stays_healthy_passes(tmp_path, tokenizer_dir):
    report = run(tmp_path, tokenizer_dir, PoolServer(ok_polls=None))
    assert report.passed, report.reasons
    assert not rule(report, "endpoint_death").fired
    assert report.watched_endpoints[0].polls > 5 and report.watched_endpoints[0].not_ok == 0


def test_a_pool_down_a_while_and_back_is_said_not_failed(tmp_path, tokenizer_dir):
    report = run(tmp_path, tokenizer_dir, PoolServer(ok_polls=3, down_polls=3))
    found = rule(report, "endpoint_death")
    assert report.passed and found.fired and found.severity == "info", report.reasons
    assert found.facts == {"dead": 0, "down_and_back": 1, "never_ok": 0}, found.facts
