"""`--serve-metrics PORT`: loadrepro's own Prometheus metrics while a run goes on, read by a plain client and by a
real Prometheus server (Debian's, fetched by scripts/engines/prometheus.sh into the engine cache): the series are
there during the run, and their last values are report.json's."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import cli, until

ROOT = Path(__file__).resolve().parents[1]
RUN = ["--profile", "soak", "--set", "load.duration_s=6", "--set", "load.rate=6", "--set", "workload.max_tokens=16",
       "--set", "workload.turn_tokens=50", "--set", "load.checkpoint_s=2", "--quiet"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def start(tmp_path: Path, port: int | str, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "loadrepro", "run", *RUN, *more, "--serve-metrics", str(port),
                             "--out", str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_metrics_are_served_while_it_runs_and_end_as_the_report_says(tmp_path):
    run = start(tmp_path, 0)
    assert run.stderr is not None
    line = ""
    for _ in range(50):  # the first lines of stderr: the URL is said before the run is planned
        line = run.stderr.readline()
        if "metrics: loadrepro's own at" in line or not line:
            break
    url = re.search(r"http://127\.0\.0\.1:\d+/metrics", line)
    assert url, line
    scrapes: list[dict] = []

    def scrape() -> bool:  # one scrape each look, until the run's process ends
        try:
            scrapes.append(values(httpx.get(url.group(0), timeout=5).text))
        except httpx.HTTPError:
            pass  # between the end of the run and the process's exit
        return run.poll() is not None

    until(scrape, 120, "the run ending")
    assert run.wait(60) in (0, 1), run.stderr.read()
    loading = [s for s in scrapes if s.get(("loadrepro_run_phase", (("loadrepro_run_phase", "loading"),))) == 1]
    assert loading and any(s[("loadrepro_requests_in_flight", ())] > 0 for s in loading)
    last = scrapes[-1]
    assert last[("loadrepro_run_phase", (("loadrepro_run_phase", "done"),))] == 1
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    served = {dict(labels)["outcome"]: v for (name, labels), v in last.items() if name == "loadrepro_requests_total"}
    assert served == {k: float(v) for k, v in report["requests"]["by_outcome"].items()}
    assert last[("loadrepro_ttft_seconds_count", ())] == report["latency"]["ttft_ms"]["count"]
    assert last[("loadrepro_health_status", (("endpoint", report["target"]["base_url"]),))] == 200
    fired = {dict(labels)["rule"] for (name, labels), v in last.items() if name == "loadrepro_rule_fired" and v == 1}
    assert fired == {r["name"] for r in report["rules"] if r["fired"]}


def test_a_port_already_taken_is_a_usage_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = cli("run", *RUN, "--serve-metrics", str(taken.getsockname()[1]), "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and "cannot listen on 127.0.0.1" in done.stderr, done.stderr


def test_the_grafana_dashboard_asks_only_for_series_loadrepro_serves():
    from loadrepro.load.live_metrics import LiveMetrics

    dashboard = json.loads((ROOT / "examples" / "grafana" / "loadrepro-soak.json").read_text())
    asked = {name for panel in dashboard["panels"] for target in panel["targets"]
             for name in re.findall(r"loadrepro_[a-z_]+", target["expr"])}
    live = LiveMetrics(0, "http://127.0.0.1:8000", linger_s=0)
    try:
        text = httpx.get(live.url, timeout=5).text
    finally:
        live.close()
    served = {name for name in re.findall(r"^# TYPE (loadrepro_[a-z_]+)", text, re.M)}
    served |= {f"{n}{suffix}" for n in served for suffix in ("_total", "_bucket", "_count", "_sum")}
    assert asked and asked <= served, asked - served


def test_the_end_waits_for_a_scrape_begun_after_the_last_values_and_written_whole():
    """The end lets a scraper take the last values: it waits for a scrape that began after them and was written
    whole. One counted as it ended had read the counters before the last request ended, held up on a busy machine
    (Prometheus's last point 66 requests, the report 75); one counted as it began could still be being written when
    the process exited, and Prometheus stored nothing of it."""
    from loadrepro.load.live_metrics import _Scrapes

    scrapes = _Scrapes()
    served = scrapes.counted(lambda environ, start_response: [b"metrics"])
    before = served({}, None)  # begun before the last values were set
    seen = scrapes.count
    after = served({}, None)
    before.close()  # written whole, but it read the values before
    assert not scrapes.taken_since(seen)
    assert list(after) == [b"metrics"] and not scrapes.taken_since(seen)  # read, not yet written whole
    after.close()
    assert scrapes.taken_since(seen) and scrapes.count == 2


def test_a_scrape_written_after_its_scrapers_timeout_is_not_taken():
    """Prometheus gives up on a scrape after its timeout (with a 1 s interval, 1 s) and stores nothing of it: a scrape
    written whole after it left is not the one the end waited for; one within it, or that says no timeout, is."""
    from loadrepro.load.live_metrics import _Scrapes

    scrapes = _Scrapes()
    served = scrapes.counted(lambda environ, start_response: [b"metrics"])
    seen = scrapes.count
    late = served({"HTTP_X_PROMETHEUS_SCRAPE_TIMEOUT_SECONDS": "0.000000001"}, None)
    late.close()  # however fast, after a nanosecond's half
    assert not scrapes.taken_since(seen)
    served({"HTTP_X_PROMETHEUS_SCRAPE_TIMEOUT_SECONDS": "600"}, None).close()
    assert scrapes.taken_since(seen)
    seen = scrapes.count
    served({"HTTP_X_PROMETHEUS_SCRAPE_TIMEOUT_SECONDS": "not a number"}, None).close()
    assert scrapes.taken_since(seen)


def test_the_end_waits_two_and_a_half_of_the_scrapers_interval_for_its_next_scrape():
    """A scraper every 20 s (Prometheus's default is 15) would miss a 15 s wait begun just after its scrape, and a
    busy one comes late."""
    from loadrepro.load.live_metrics import _Scrapes

    scrapes = _Scrapes()
    assert scrapes.linger_s(15.0) == 15.0  # no scrape seen: the least
    scrapes.begun = [100.0, 110.0, 120.0]
    assert scrapes.linger_s(15.0) == 25.0
    scrapes.begun = [0.0, 100.0]
    assert scrapes.linger_s(15.0) == 60.0  # at most


def test_one_scrape_by_prometheus_is_a_scraper_scraping_and_one_plain_look_is_not():
    """Prometheus with a long interval may scrape a short run once: the end still waits for it to take the last
    values. A one-off look (curl) is not waited for."""
    from loadrepro.load.live_metrics import _Scrapes

    scrapes = _Scrapes()
    served = scrapes.counted(lambda environ, start_response: [b"metrics"])
    served({}, None).close()
    assert not scrapes.scraping()
    served({"HTTP_X_PROMETHEUS_SCRAPE_TIMEOUT_SECONDS": "10"}, None).close()
    assert scrapes.scraping()
