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


# A short run: 150 conversations of 2 turns, one token each, 12 at once: a second or two. The clock reads memory once
# a minute here, so only the reading at the start, those at request milestones and the idle one at the end are taken.
SHORT = ["--profile", "healthy", "--set", "workload.conversations=150", "--set", "workload.turns=2", "--set",
         "workload.prefix_tokens=100", "--set", "workload.turn_tokens=20", "--set", "workload.max_tokens=1", "--set",
         "load.concurrency=12", "--set", "watch.memory_interval_s=60", "--set", "watch.metrics_path=''", "--quiet"]


def _short_run(out, *engine: str, more: tuple[str, ...] = ()) -> tuple[int, dict]:
    command = f"{sys.executable} -m tests.memory_server --port {{port}} --tokens 1 --delay 0 " + " ".join(engine)
    done = cli("run", *SHORT, *more, "--engine-cmd", command, "--out", str(out))
    return done.returncode, json.loads((out / "report.json").read_text())


def test_a_short_run_is_read_at_request_milestones_and_its_leak_found(tmp_path):
    """300 requests quicker than the clock's second reading: read at the warm-up's end and every tenth of the
    requests, 1 MiB kept per request is found (a failure with a limit set), and an engine that keeps none is not."""
    code, leaking = _short_run(tmp_path / "leak", "--leak-kb", "1024", more=("--set",
                                                                             "verdict.max_memory_growth_mb=64"))
    memory, growth = leaking["engine_memory"], rule(leaking, "engine_memory_growth")
    assert memory["not_judged"] is None and memory["readings"] >= 8, memory
    assert code == 1 and growth["fired"] and growth["severity"] == "fail", (memory, leaking["reasons"])
    assert 160 <= memory["growth_mb"] <= 330 and memory["r"] >= 0.8, memory  # 240 requests after the warm-up
    code, flat = _short_run(tmp_path / "flat", more=("--set", "verdict.max_memory_growth_mb=64"))
    assert code == 0 and not rule(flat, "engine_memory_growth")["fired"], flat["engine_memory"]
    assert flat["engine_memory"]["not_judged"] is None and flat["engine_memory"]["readings"] >= 8


def test_too_few_readings_are_said_not_judged(tmp_path):
    """A one-second soak read once a minute: two readings, so its growth is not judged, and the report says so."""
    code, report = _short_run(tmp_path, "--leak-kb", "1024", more=("--set", "load.duration_s=1", "--set",
                                                                   "load.checkpoint_s=0"))
    memory = report["engine_memory"]
    assert code == 0 and not rule(report, "engine_memory_growth")["fired"]
    assert memory["readings"] == 2 and memory["not_judged"].startswith("2 readings"), memory
    assert "growth not judged: 2 readings" in (tmp_path / "report.md").read_text()


def test_milestones_are_the_warm_ups_end_and_every_tenth_once_each():
    from loadrepro.load.watch.memory import Milestones, milestones

    assert milestones(300) == [30, 60, 90, 120, 150, 180, 210, 240, 270, 300]
    assert milestones(8) == [1, 2, 3, 4, 5, 6, 7, 8] and milestones(None) == [] and milestones(0) == []
    crossed = Milestones(300)
    assert [crossed.passed(n) for n in (29, 30, 30, 95, 96, 300, 301)] == [False, True, False, True, False, True,
                                                                           False]


def test_growth_that_levels_off_or_stays_within_a_prompt_caches_cap_is_not_a_leak(tmp_path):
    """Memory kept for the first 150 of 300 requests only (a cache that filled) levels off: no finding. 1 MiB kept
    per request by an engine started with llama.cpp's --cache-ram 1024: within the cap, information only, even with
    a limit set; with --cache-ram 64 the same growth is beyond the cap and fails."""
    limit = ("--set", "verdict.max_memory_growth_mb=32")
    code, filled = _short_run(tmp_path / "filled", "--leak-kb", "1024", "--leak-until", "150", more=limit)
    memory = filled["engine_memory"]
    assert code == 0 and not rule(filled, "engine_memory_growth")["fired"] and memory["plateaued"], memory
    assert memory["growth_mb"] > 64 and memory["not_judged"] is None, memory
    code, cached = _short_run(tmp_path / "cached", "--leak-kb", "1024", "--cache-ram", "1024", more=limit)
    growth = rule(cached, "engine_memory_growth")
    assert code == 0 and growth["severity"] == "info" and growth["facts"]["cache_cap_mb"] == 1024, growth
    assert cached["engine_memory"]["cache_cap_mb"] == 1024 and not cached["engine_memory"]["plateaued"]
    code, beyond = _short_run(tmp_path / "beyond", "--leak-kb", "1024", "--cache-ram", "64", more=limit)
    assert code == 1 and rule(beyond, "engine_memory_growth")["severity"] == "fail", beyond["reasons"]


def test_a_prompt_caches_cap_is_read_from_the_engine_command():
    from loadrepro.judge.memory import cache_cap_mb

    assert cache_cap_mb("llama-server -m m.gguf --port 8000") == 8192
    assert cache_cap_mb("scripts/engines/serve-llamacpp.sh m.gguf 127.0.0.1 8000 --cache-ram 512") == 512
    assert cache_cap_mb("llama-server -m m.gguf -cram 0") is None
    assert cache_cap_mb("llama-server --cache-ram -1") is None
    assert cache_cap_mb("vllm serve m") is None and cache_cap_mb(None) is None
