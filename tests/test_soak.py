"""Long runs, shortened: windows and their rules against engines that degrade, leak or hold steady; the rate
ceiling; checkpoints that survive SIGKILL. Every run here is bounded by its duration (a few seconds)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.soak import errors_after_recovery
from loadrepro.judge.windows import windows
from loadrepro.records import Outcome
from loadrepro.schema.run_report import RunReport
from tests.builders import record, result, ruled
from tests.helpers import cli, facts, fired, report, until
from tests.stub_server import StubServer

SOAK = ["--set", "workload.prefix_tokens=200", "--set", "workload.turn_tokens=50", "--set", "workload.max_tokens=4",
        "--set", "workload.conversations=3", "--set", "workload.warm_max_tokens=4", "--set", "verdict.window_s=1.5",
        "--set", "watch.metrics_interval_s=0.05", "--set", "watch.health_interval_s=0.2", "--set", "model='stub'"]


def soak(url: str, out: Path, *extra: str, duration_s: float = 6.0) -> subprocess.CompletedProcess:
    return cli("run", "--base-url", url, "--out", str(out), "--quiet",
                           *SOAK, "--set", f"load.duration_s={duration_s}", *extra)


def test_an_engine_whose_ttft_grows_fails_the_degradation_rule_naming_the_windows(tmp_path, pictures):
    # Six streams at a time: the last window, at about 0.5 s a first token, still has the five the rule needs.
    with StubServer("ok", tokens=2, ttft_growth_per_s=0.1).running() as stub:
        done = soak(stub.url, tmp_path, "--set", "load.concurrency=6", "--set", "verdict.max_ttft_growth=0.5", "--png")
    assert done.returncode == 1, done.stdout + done.stderr
    rules = fired(report(tmp_path))
    assert "TTFT p95 grew from" in rules["degradation"], rules
    assert "in window 2 (1.5-3 s)" in rules["degradation"] and "in window 4 (4.5-6 s)" in rules["degradation"]
    data = json.loads((tmp_path / "report.json").read_text())
    assert [w["index"] for w in data["windows"]] == [1, 2, 3, 4]
    assert "## Windows" in (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()  # the timeline's latency panel, as the page describes it
    assert 'data-reference-window-s="1.5-3"' in page and 'data-windows="0-1.5:' in page


def test_a_few_slow_requests_in_the_last_window_are_not_degradation(tmp_path):
    """Requests of ~30 ms TTFT, a few dozen a window, and three of the last window's 200 ms slower: its p95 may read
    as their 230 ms, yet the window's requests cannot say its p95 grew (at least the 87th percentile's value, a fast
    one, against the reference's slowest). The TTFT-growth stub above is the rule's must."""
    with StubServer("ok", tokens=2, first_token_delay_s=0.03, token_delay_s=0.04, slow=(4.8, 3, 0.2)).running() as stub:
        done = soak(stub.url, tmp_path, "--set", "load.concurrency=2", "--set", "verdict.max_ttft_growth=1.0")
    assert stub.slowed == 3
    data = json.loads((tmp_path / "report.json").read_text())
    last = data["windows"][-1]
    assert last["ttft_p95_bounds_ms"][1] >= 200, last  # the slow ones were sent in the last window
    assert done.returncode == 0 and "degradation" not in fired(report(tmp_path)), (last, fired(report(tmp_path)))


def test_an_engine_that_leaks_kv_when_quiet_fails_the_leak_rule(tmp_path):
    with StubServer("ok", tokens=2, kv_leak_per_request=0.002).running() as stub:
        done = soak(stub.url, tmp_path, "--set", "load.arrival='poisson'", "--set", "load.rate=25")
    assert done.returncode == 1, done.stdout + done.stderr
    rules = fired(report(tmp_path))
    leak = facts(report(tmp_path), "kv_leak")
    assert leak["kv_usage_to"] > leak["kv_usage_from"] and leak["windows"] >= 3, rules
    assert "degradation" not in rules


def test_a_steady_engine_passes_its_soak_with_windows(tmp_path):
    with StubServer("ok", tokens=2, kv_leak_per_request=0.0).running() as stub:
        done = soak(stub.url, tmp_path, "--set", "load.arrival='poisson'", "--set", "load.rate=25")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "report.json").read_text())
    assert len(data["windows"]) == 4 and all(w["requests"] > 0 for w in data["windows"])
    assert all(w["kv_usage_quiet"] == 0 for w in data["windows"])
    assert not {"degradation", "kv_leak", "errors_after_recovery"} & set(fired(report(tmp_path)))
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    started = sum(1 for line in lines if json.loads(line)["turn"] == 1)
    assert data["requests"]["conversations"] == started > 3  # the three planned conversations, over and over
    assert (f"a plan of 6 requests in 3 conversations, repeated for 6 s: {len(lines):,} requests in {started:,} "
            "conversations ran") in (tmp_path / "report.md").read_text()


def test_max_rps_caps_starts_in_every_one_second_window(tmp_path):
    with StubServer("ok", tokens=2).running() as stub:
        done = soak(stub.url, tmp_path, "--set", "load.concurrency=8", "--set", "load.max_rps=20", duration_s=3.0)
    assert done.returncode == 0, done.stdout + done.stderr
    sent = sorted(r["sent_ns"] for r in map(json.loads, (tmp_path / "requests.jsonl").read_text().splitlines())
                  if r.get("sent_ns"))
    most = max(sum(1 for t in sent[i:] if t < start + 1_000_000_000) for i, start in enumerate(sent))
    assert len(sent) >= 50 and most <= 20, (len(sent), most)


@pytest.mark.slow
def test_a_soak_killed_by_sigkill_leaves_a_checkpoint_no_older_than_its_interval(tmp_path):
    with StubServer("ok", tokens=2, token_delay_s=0.01).running() as stub:
        process = subprocess.Popen(
            [sys.executable, "-m", "loadrepro", "run", "--base-url", stub.url, "--out", str(tmp_path), "--quiet",
             *SOAK, "--set", "load.duration_s=60", "--set", "load.checkpoint_s=0.5"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            report = tmp_path / "report.json"
            until(report.exists, 60, "a first checkpoint")
            written = {report.stat().st_mtime_ns}
            # two more checkpoints: the soak is going on
            until(lambda: written.add(report.stat().st_mtime_ns) or len(written) >= 3, 60, "two more checkpoints")
            os.kill(process.pid, signal.SIGKILL)
            killed = time.time()
        finally:
            process.kill()
            process.wait(10)
    data = RunReport.model_validate_json(report.read_text())
    assert data.verdict == "running" and data.finished is False and data.requests.total > 0
    assert killed - report.stat().st_mtime <= 0.5 + 1.0  # the interval, and a checkpoint's own writing time
    assert (tmp_path / "report.md").read_text().startswith("# loadrepro: RUNNING")


def test_errors_that_come_back_after_a_recovery_fail():
    S = VerdictSpec(window_s=1.0)
    records = [record(1, Outcome.SERVER_ERROR, end_s=0.6), record(2, end_s=1.6), record(3, end_s=2.6),
               record(4, Outcome.SERVER_ERROR, end_s=3.6), record(5, end_s=3.7)]
    run = result(records, duration_s=4.0)
    assert [w.failed for w in windows(run, 1.0)] == [1, 0, 0, 1]
    assert ruled(errors_after_recovery, run, S).summary == (
        "errors came back in window 4 (3-4 s) (1 of 2 requests failed) after the engine had recovered in window 3 "
        "(2-3 s), following failures in window 1 (0-1 s)")
    assert ruled(errors_after_recovery, result(records[:3], duration_s=4.0), S) is None


@pytest.mark.parametrize(("duration_s", "count"), [(1.4, 0), (1.5, 2), (2.4, 2), (2.5, 3)])
def test_only_whole_windows_count(duration_s, count):
    assert len(windows(result([record(1)], duration_s=duration_s), 1.0)) == count


def test_a_soak_that_keeps_few_records_in_memory_still_counts_and_judges_every_one(tmp_path):
    with StubServer("ok", tokens=4, ttft_growth_per_s=0.1).running() as stub:
        done = soak(stub.url, tmp_path, "--set", "load.concurrency=6", "--set", "verdict.max_ttft_growth=0.5",
                    "--set", "load.keep_records=20")  # six at a time: enough requests in the last window
    assert done.returncode == 1, done.stdout + done.stderr
    data = json.loads((tmp_path / "report.json").read_text())
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert data["requests"]["total"] == len(lines) == data["request_table_total"] > 40
    assert sum(w["requests"] for w in data["windows"]) == len(lines)  # sent within the whole windows: all here
    assert len(data["request_table"]) == 20 and data["latency"]["ttft_ms"]["p95"] > data["latency"]["ttft_ms"]["p50"]
    assert any(n.startswith("records: ") and "counted but not kept in memory" in n for n in data["notes"])
    assert "TTFT p95 grew from" in fired(report(tmp_path))["degradation"]  # judged from the windows' sketches
