"""The CI soak recipe (examples/ci/soak.sh, which the example workflow runs) does what it says, shortened: the
engine starts, the soak runs, the run directory holds the reports and junit.xml, and the exit code is the verdict."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--set", "workload.turn_tokens=50", "--set", "workload.max_tokens=8", "--set", "load.rate=10", "--set",
         "verdict.window_s=1", "--set", "load.checkpoint_s=1"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(("scenario", "prefix", "code", "verdict"), [
    ("healthy", 300, 0, "pass"),
    ("page-index", 2500, 1, "fail"),  # its index table holds 2,048 tokens: the first prompt breaks the stock engine
])
def test_the_soak_recipe_exits_with_the_verdict_and_keeps_the_run(tmp_path, scenario, prefix, code, verdict):
    port, loadrepro = free_port(), f"{sys.executable} -m loadrepro"
    env = {**os.environ, "LOADREPRO": loadrepro, "OUT": str(tmp_path / "run"), "DURATION": "4", "PORT": str(port),
           "ENGINE_CMD": f"{loadrepro} sim --scenario {scenario} --port {port}"}
    done = subprocess.run(["bash", str(ROOT / "examples" / "ci" / "soak.sh"), *SHORT, "--set",
                           f"workload.prefix_tokens={prefix}"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == code, done.stdout + done.stderr
    run = tmp_path / "run"
    report = json.loads((run / "report.json").read_text())
    assert report["verdict"] == verdict and report["finished"] is True
    assert (run / "junit.xml").exists() and (run / "engine.log").read_text()
    assert f"loadrepro exited {code}" in done.stdout


def test_the_workflow_runs_the_recipe_keeps_the_run_and_publishes_junit():
    workflow = (ROOT / "examples" / "ci" / "github-actions-soak.yml").read_text()
    assert "run: bash examples/ci/soak.sh" in workflow
    assert "path: soak-run/" in workflow and "report_paths: soak-run/junit.xml" in workflow
    assert workflow.count("if: always()") == 2  # the artifact and the test results are kept when the soak fails


@pytest.mark.parametrize(("after", "code", "verdict"), [
    (None, 0, "pass"),  # the simulated engine: back after the kill, the aborted streams freed
    ("dead", 1, "fail"),  # an engine of ours that comes back answering /health 503 and every request 500
])
@pytest.mark.slow
def test_the_chaos_soak_recipe_kills_and_aborts_and_judges_recovery(tmp_path, after, code, verdict):
    loadrepro = f"{sys.executable} -m loadrepro"
    env = {**os.environ, "LOADREPRO": loadrepro, "OUT": str(tmp_path / "run"), "DURATION": "9", "KILL_DOWN": "1",
           "RECOVER": "5", "ABORTS": "2"}
    if after:
        env["ENGINE_CMD"] = (f"{sys.executable} -m tests.restart_server --port {{port}} --state {tmp_path / 'starts'} "
                             f"--after {after}")
    done = subprocess.run(["bash", str(ROOT / "examples" / "ci" / "chaos-soak.sh"), *SHORT, "--set",
                           "workload.prefix_tokens=300"], env=env, capture_output=True, text=True, timeout=180,
                          cwd=ROOT)
    assert done.returncode == code, done.stdout + done.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["verdict"] == verdict
    kill, *rest = report["chaos"]
    assert (kill["action"], kill["at_s"] // 1) == ("kill", 3)
    assert kill["recovered"] is (after is None)
    if after is None:
        [burst] = rest
        assert (burst["action"], burst["at_s"] // 1) == ("abort_burst", 6)
        assert burst["recovered"] and "cancelled" in burst["detail"]
    else:  # an abort burst is not caused on an engine that is not back: nothing would be judged by it
        [burst] = rest
        assert burst["recovered"] is None and burst["action"] == "abort_burst"
        said = "never caused: the engine was still down from the kill at 3.0 s"
        assert said in burst["detail"], burst
    log = (tmp_path / "run" / "engine.log").read_text()
    assert "===== loadrepro: killed at 3 s (chaos), started again =====" in log


@pytest.mark.slow
def test_the_regression_recipe_gates_tonight_against_the_last_good_night(tmp_path):
    """First night: no baseline, the run passes and becomes one. Same engine again: the gate is open. An engine
    five times slower between tokens: the gate closes (exit 1) and the baseline is kept as it was. A 10 ms step:
    at 4 ms a busy machine's 1.5 ms of noise between two nights of one engine was 60% of the time per token. And
    answers of 64 tokens: over 8, one night of one engine had a request's mean gap at half the step (ITL p50 5.3
    against 9.6 ms the next, on CI's busy machine): a few dozen ms of lag (the client reading tokens late and then
    at once, or the engine making up late steps at once) is a large share of 7 gaps, and below the gate's 1 ms per
    token over 63."""
    loadrepro = f"{sys.executable} -m loadrepro"

    def night(name: str, step_s: float) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LOADREPRO": loadrepro, "OUT": str(tmp_path / name),
               "BASELINE": str(tmp_path / "baseline"), "NEXT_BASELINE": str(tmp_path / "baseline"),
               "ENGINE_CMD": f"{loadrepro} sim --scenario healthy --step-s {step_s} --port {{port}}"}
        return subprocess.run(["bash", str(ROOT / "examples" / "ci" / "regression.sh"), *SHORT, "--set",
                               "load.duration_s=4", "--set", "workload.prefix_tokens=300", "--set",
                               "workload.max_tokens=64"], env=env, capture_output=True, text=True, timeout=180)

    first = night("first", 0.01)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "loadrepro gate" not in first.stdout and (tmp_path / "baseline" / "report.json").exists()
    same = night("same", 0.01)
    assert same.returncode == 0 and "loadrepro gate exited 0" in same.stdout, same.stdout + same.stderr
    slow = night("slow", 0.05)
    assert slow.returncode == 1 and "loadrepro gate: CLOSED" in slow.stdout, slow.stdout + slow.stderr
    assert json.loads((tmp_path / "baseline" / "report.json").read_text())["label"] == \
        json.loads((tmp_path / "same" / "report.json").read_text())["label"]
    assert (tmp_path / "slow" / "gate" / "gate.md").exists()
