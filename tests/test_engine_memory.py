"""The memory of an engine loadrepro started, read from /proc beside the health polls: an engine that keeps memory
for every request it answers fails rule engine_memory_growth, with report.json engine_memory saying how much and how
steadily; one that holds memory only while requests run (it comes back when idle), and one that keeps none, pass.
The test engine is tests/memory_server.py, started with --engine-cmd."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import cli, rule

RUN = ["--profile", "healthy", "--set", "workload.conversations=60", "--set", "workload.turns=2", "--set",
       "workload.prefix_tokens=200", "--set", "workload.turn_tokens=50", "--set", "workload.max_tokens=4", "--set",
       "load.concurrency=4", "--set", "watch.memory_interval_s=0.1", "--set", "watch.metrics_path=''", "--quiet"]


def _run(tmp_path, *engine: str, limit: str = "0", more: tuple[str, ...] = ()) -> tuple[int, dict]:
    command = f"{sys.executable} -m tests.memory_server --port {{port}} " + " ".join(engine)
    done = cli("run", *RUN, "--set", f"verdict.max_memory_growth_mb={limit}", *more, "--engine-cmd", command, "--out",
               str(tmp_path))
    return done.returncode, json.loads((tmp_path / "report.json").read_text())


def test_an_engine_that_keeps_memory_per_request_fails_engine_memory_growth(tmp_path):
    """With [verdict] max_memory_growth_mb set, a failure; without it, a warning (a prompt cache in RAM grows so)."""
    code, report = _run(tmp_path / "max", "--leak-kb", "1024", limit="64", more=("--set", "verdict.window_s=0.5"))
    growth = rule(report, "engine_memory_growth")
    assert code == 1 and growth["fired"] and growth["severity"] == "fail", growth
    code, warned = _run(tmp_path / "warn", "--leak-kb", "1024")
    assert code == 0 and rule(warned, "engine_memory_growth")["severity"] == "info"
    memory = report["engine_memory"]
    # 120 requests of 1 MiB each, the first fifth the warm-up's: about 96 MiB from its end
    assert 64 < memory["growth_mb"] <= 130 and 0.8 <= memory["growth_per_1000_requests_mb"] / 1000 <= 1.3, memory
    assert memory["r"] >= 0.8 and memory["peak_mb"] >= memory["end_mb"] > memory["start_mb"], memory
    assert growth["facts"]["growth_mb"] == memory["growth_mb"] and growth["facts"]["served"] == 120
    _memory_drawn(tmp_path / "max", memory)
    by_window = [w["memory_mb"] for w in report["windows"] if w["memory_mb"] is not None]  # a soak's, window by window
    assert len(by_window) >= 2 and by_window[-1] > by_window[0] and max(by_window) <= memory["peak_mb"], by_window
    assert "engine MiB |" in (tmp_path / "max" / "report.md").read_text()


def _memory_drawn(run_dir, memory: dict) -> None:
    """The readings on disk are the timeline's memory panel, rebuilt from the run directory as `compare` does."""
    from loadrepro.report.plots import timeline_figure
    from loadrepro.report.timeline import timeline_from_run_dir
    from loadrepro.schema.run_report import RunReport

    timeline = timeline_from_run_dir(run_dir, RunReport.model_validate_json((run_dir / "report.json").read_text()))
    assert timeline is not None and len(timeline.memory_t) == memory["readings"], memory
    assert timeline.memory_mib[:, 0].max() == pytest.approx(memory["peak_mb"], abs=0.1)
    assert timeline.memory_mib[-1, 0] - timeline.memory_mib[0, 0] > 64  # a MiB per request, 120 requests
    labels = [ax.get_ylabel() for ax in timeline_figure([timeline]).axes]
    assert "engine MiB" in labels, labels


@pytest.mark.parametrize("engine", [["--hold-kb", "4096"], []], ids=["held-while-running", "none-kept"])
def test_an_engine_whose_memory_comes_back_or_never_grows_passes(tmp_path, engine):
    code, report = _run(tmp_path, *engine, limit="64")
    assert code == 0 and not rule(report, "engine_memory_growth")["fired"], report["reasons"]
    assert report["engine_memory"]["readings"] >= 5 and abs(report["engine_memory"]["growth_mb"]) < 32


def test_a_target_at_a_url_is_read_from_the_resident_memory_its_metrics_publish(tmp_path):
    """Served in this process, the test engine's process_resident_memory_bytes is this process's: 1 MiB kept per
    request fails the run with a limit set; none kept does not."""
    from tests.memory_server import app
    from tests.stub_server import serving

    def url_run(out, leak_kb: int) -> tuple[int, dict]:
        with serving(app(leak_kb, 0, 4, 0.02)) as url:
            done = cli("run", *RUN[:-5], "--set", "watch.metrics_interval_s=0.1", "--set",
                       "verdict.max_memory_growth_mb=48", "--base-url", url, "--out", str(out), "--quiet")
        return done.returncode, json.loads((out / "report.json").read_text())

    code, leaking = url_run(tmp_path / "leak", 1024)
    memory, growth = leaking["engine_memory"], rule(leaking, "engine_memory_growth")
    assert memory["source"] == "metrics" and memory["anon_end_mb"] is None and memory["swap_peak_mb"] is None, memory
    assert code == 1 and growth["fired"] and growth["facts"]["source"] == "metrics", (code, leaking["reasons"])
    assert 64 < memory["growth_mb"] <= 130, memory
    code, flat = url_run(tmp_path / "flat", 0)
    assert code == 0 and not rule(flat, "engine_memory_growth")["fired"], flat["engine_memory"]
    assert flat["engine_memory"]["readings"] >= 5


def test_a_target_at_a_url_has_no_engine_memory(tmp_path):
    done = cli("run", "--profile", "healthy", "--set", "workload.conversations=2", "--out", str(tmp_path), "--quiet",
               env={"LOADREPRO_SIM_IN_PROCESS": "1"})
    assert done.returncode == 0
    assert json.loads((tmp_path / "report.json").read_text())["engine_memory"] is None
