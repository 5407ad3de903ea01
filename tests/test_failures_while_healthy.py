"""Rule failures_while_healthy against a server whose streams all fail just after a /health poll, with the load's
end: too soon after for two more polls, so a failure counts by /health's last word after the run (200: every failed
request counted, as a user reads the words), and not when that word is 503 (the engine said it was down)."""

from __future__ import annotations

import json

from tests.failing_server import app
from tests.helpers import cli, facts
from tests.stub_server import serving

SMALL = ["--profile", "healthy", "--set", "workload.conversations=4", "--set", "workload.turns=1", "--set",
         "workload.prefix_tokens=200", "--set", "workload.max_tokens=4", "--set", "load.concurrency=4", "--set",
         "watch.health_interval_s=0.5", "--set", "watch.metrics_path=''", "--quiet"]


def _run(out, dying: int | None) -> dict:
    with serving(app(dying)) as url:
        done = cli("run", *SMALL, "--base-url", url, "--out", str(out))
    assert done.returncode == 1, done.stderr
    return json.loads((out / "report.json").read_text())


def test_failures_at_the_loads_end_count_while_health_says_200_after_the_run(tmp_path):
    report = _run(tmp_path, None)
    assert report["requests"]["by_outcome"] == {"stream_error": 4}
    found = facts(report, "failures_while_healthy")
    assert found.get("requests") == 4 and found.get("first_outcome") == "stream_error", found
    assert found["failed"] == 4
    assert any(reason.startswith("4 requests failed while /health answered 200") for reason in report["reasons"])


def test_failures_an_engine_then_said_it_was_down_for_are_not_while_healthy(tmp_path):
    report = _run(tmp_path, 4)
    assert report["requests"]["by_outcome"] == {"stream_error": 4}
    assert facts(report, "failures_while_healthy") == {}
