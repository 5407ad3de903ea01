"""`--serve-metrics PORT` read by a real Prometheus server (Debian's, fetched by scripts/engines/prometheus.sh into
the engine cache): the series are there during the run, and their last values are report.json's."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import httpx
import pytest

from loadrepro.load.engine import free_port
from tests.helpers import until
from tests.test_live_metrics import start

pytestmark = [pytest.mark.engine]


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def query(base: str, expr: str) -> list[dict]:
    answer = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=5).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _targets(base: str) -> list[dict]:
    """Each target's last scrape as Prometheus tells it (its error, its duration), for a failure's message."""
    answer = httpx.get(f"{base}/api/v1/targets", timeout=5).json()
    return [{k: t.get(k) for k in ("health", "lastError", "lastScrape", "lastScrapeDuration")}
            for t in answer["data"]["activeTargets"]]


def test_a_real_prometheus_scrapes_the_run_and_its_last_scrape_is_the_report(tmp_path, prometheus):
    port, web = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    # Prometheus gives up on a scrape after its timeout (at most the interval), and the run's end takes a scrape
    # written within half of it: 5 s lets a machine busy with engines answer. A scrape may come once in the load.
    config.write_text(f"global:\n  scrape_interval: 5s\n  scrape_timeout: 5s\n"
                      "scrape_configs:\n  - job_name: loadrepro\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{port}']\n")
    server = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{web}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{web}"
    try:
        until(lambda: _ready(base), 30, "Prometheus ready")
        # 12 s of load: two or three scrapes fall in it, so one that a machine busy with engines makes late still
        # leaves one. Asked once the run is over (a scrape while it loaded, as stored), not raced against its exit.
        run = start(tmp_path, port, "--set", "load.duration_s=12")
        assert run.wait(120) in (0, 1)
        loading = 'max_over_time(loadrepro_run_phase{loadrepro_run_phase="loading"}[5m]) == 1'
        try:
            during = until(lambda: query(base, loading), 30, "a scrape stored from while the run loaded")
        except AssertionError as missed:
            raise AssertionError(f"{missed}; its scrapes as Prometheus tells them: {_targets(base)}") from None
        assert during[0]["metric"]["job"] == "loadrepro"
        report = json.loads((tmp_path / "run" / "report.json").read_text())
        # The run's last scrape (the one its end waited for, phase `done`) may still be being stored when the run has
        # exited: its values are read once Prometheus has it.
        done = 'last_over_time(loadrepro_run_phase{loadrepro_run_phase="done"}[5m]) == 1'
        try:
            until(lambda: query(base, done), 60, "Prometheus to store the run's last scrape")
        except AssertionError as missed:
            stored = {expr: query(base, expr) for expr in (
                "last_over_time(loadrepro_run_phase[5m]) == 1", "last_over_time(loadrepro_metrics_scrapes_total[5m])",
                "count_over_time(up[5m])", "sum_over_time(up[5m])", "max_over_time(scrape_duration_seconds[5m])")}
            raise AssertionError(f"{missed}; its scrapes as Prometheus tells them: {_targets(base)}; stored: {stored}; "
                                 f"the run said: {run.stderr.read() if run.stderr else ''}") from None
        # The target is gone: Prometheus marked its series stale, so each is read as its last scrape left it.
        totals = {r["metric"]["outcome"]: float(r["value"][1])
                  for r in query(base, "last_over_time(loadrepro_requests_total[5m])")}
        assert totals == {k: float(v) for k, v in report["requests"]["by_outcome"].items()}
        count = query(base, "last_over_time(loadrepro_ttft_seconds_count[5m])")
        assert float(count[0]["value"][1]) == report["latency"]["ttft_ms"]["count"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)


