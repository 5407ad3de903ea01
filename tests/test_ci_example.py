"""The CI soak recipe (examples/ci/soak.sh, which the example workflow runs) does what it says, shortened: the
engine starts, the soak runs, the run directory holds the reports and junit.xml, and the exit code is the verdict."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--set", "workload.turn_tokens=50", "--set", "workload.max_tokens=8", "--set", "load.rate=10", "--set",
         "verdict.window_s=1", "--set", "load.checkpoint_s=1"]


@pytest.mark.parametrize(("scenario", "prefix", "code", "verdict"), [
    ("healthy", 300, 0, "pass"),
    ("page-index", 2500, 1, "fail"),  # its index table holds 2,048 tokens: the first prompt breaks the stock engine
])
def test_the_soak_recipe_exits_with_the_verdict_and_keeps_the_run(tmp_path, scenario, prefix, code, verdict):
    loadrepro = f"{sys.executable} -m loadrepro"
    env = {**os.environ, "LOADREPRO": loadrepro, "OUT": str(tmp_path / "run"), "DURATION": "4",
           "ENGINE_CMD": f"{loadrepro} sim --scenario {scenario} --port {{port}}"}
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
    assert "run: bash loadrepro-src/examples/ci/soak.sh" in workflow
    assert "path: soak-run/" in workflow and "report_paths: soak-run/junit.xml" in workflow
    assert workflow.count("if: always()") == 2  # the artifact and the test results are kept when the soak fails


@pytest.mark.parametrize("name", ["github-actions-soak.yml", "github-actions-regression.yml",
                                  "github-actions-stress.yml"])
def test_the_workflows_install_loadrepro_from_its_pinned_source_and_run_its_script(name):
    """No registry serves loadrepro: each workflow checks out its source at a pinned ref, installs that, and runs
    the script from the same checkout, so that nothing has to be copied beside the workflow."""
    workflow = (ROOT / "examples" / "ci" / name).read_text()
    assert "pip install loadrepro" not in workflow and "run: pip install ./loadrepro-src" in workflow
    assert "ref: ${{ env.LOADREPRO_REF }}" in workflow and "path: loadrepro-src" in workflow
    assert "run: bash loadrepro-src/examples/ci/" in workflow and "run: bash examples/" not in workflow


def test_every_ci_example_takes_the_engine_command_with_the_port_as_loadrepro_does():
    """One convention: ENGINE_CMD holds {port}, as --engine-cmd does, and loadrepro starts the engine."""
    for script in ("soak.sh", "chaos-soak.sh", "regression.sh", "stress-nightly.sh"):
        text = (ROOT / "examples" / "ci" / script).read_text()
        assert '--engine-cmd "$ENGINE_CMD"' in text and "$PORT" not in text, script
    for name in ("github-actions-soak.yml", "github-actions-regression.yml", "github-actions-stress.yml"):
        commented = [line for line in (ROOT / "examples" / "ci" / name).read_text().splitlines()
                     if "# ENGINE_CMD:" in line]
        assert commented and all("{port}" in line for line in commented), name


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
@pytest.mark.timeout(900)  # four nights of three trials, each on a fresh engine
def test_the_regression_recipe_gates_tonight_against_the_last_good_night(tmp_path):
    """First night: no baseline, its three trials pass and become one. The same engine twice more: the gate is open
    both nights, the gap between each side's trials the noise. An engine five times slower between tokens: the gate
    closes (exit 1) and the baseline is kept as it was. Every night writes to the same directory, as a nightly job
    does, and the baseline is a copy of an earlier night's: its trials are read from the copy, not from tonight's,
    whose paths the copy lists. Every night is kept in the history, the closed one too. A 10 ms step: at 4 ms a busy
    machine's 1.5 ms of noise between two nights of one engine was 60% of the time per token. And answers of 64
    tokens: over 8, one night of one engine had a request's mean gap at half the step (ITL p50 5.3 against 9.6 ms
    the next, on CI's busy machine): a few dozen ms of lag (the client reading tokens late and then at once, or the
    engine making up late steps at once) is a large share of 7 gaps, and below the gate's 1 ms per token over 63."""
    loadrepro = f"{sys.executable} -m loadrepro"

    def night(step_s: float) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LOADREPRO": loadrepro, "OUT": "nightly-run", "BASELINE": "baseline",
               "NEXT_BASELINE": "baseline", "HISTORY": "history",
               "ENGINE_CMD": f"{loadrepro} sim --scenario healthy --step-s {step_s} --port {{port}}"}
        return subprocess.run(["bash", str(ROOT / "examples" / "ci" / "regression.sh"), *SHORT, "--set",
                               "load.duration_s=3", "--set", "workload.prefix_tokens=300", "--set",
                               "workload.max_tokens=64"], env=env, capture_output=True, text=True, timeout=300,
                              cwd=tmp_path, check=False)

    first = night(0.01)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "loadrepro gate" not in first.stdout and (tmp_path / "baseline" / "report.json").exists()
    assert json.loads((tmp_path / "baseline" / "report.json").read_text())["trials"]["n"] == 3
    for _ in range(2):
        same = night(0.01)
        assert same.returncode == 0 and "loadrepro gate exited 0" in same.stdout, same.stdout + same.stderr
        assert "Noise between runs: the gap between each side's trials (3 and 3)" in same.stdout
    kept = (tmp_path / "baseline" / "report.json").read_text()
    slow = night(0.05)
    assert slow.returncode == 1 and "loadrepro gate: CLOSED" in slow.stdout, slow.stdout + slow.stderr
    assert "| baseline: baseline | run: nightly-run |" in slow.stdout
    assert (tmp_path / "baseline" / "report.json").read_text() == kept
    assert (tmp_path / "nightly-run" / "gate" / "gate.md").exists()
    assert "the spread of 9 earlier runs (--history)" in slow.stdout  # the three nights before, 9 trials
    assert len(list((tmp_path / "history").iterdir())) == 4  # every night, the closed one too


def test_the_stress_workflow_keeps_the_battery_publishes_each_phase_and_the_baseline_only_when_open():
    workflow = (ROOT / "examples" / "ci" / "github-actions-stress.yml").read_text()
    assert "run: bash loadrepro-src/examples/ci/stress-nightly.sh" in workflow
    assert "report_paths: nightly-stress/junit.xml" in workflow and "path: nightly-stress/" in workflow
    assert workflow.count("if: always()") == 2  # the battery and its test cases are kept when the gate closes
    keep = workflow.split("name: Keep tonight's stress.json as the next baseline")[1]
    assert "if:" not in keep and "path: next-stress-baseline/" in keep  # only after a night whose gate was open


@pytest.mark.slow
@pytest.mark.timeout(300)  # three nights of two phases, each on a fresh engine
def test_the_stress_recipe_fails_on_a_phase_that_passed_the_night_before(tmp_path):
    """First night: no baseline, its battery becomes one. The same engine again: the gate is open. An engine that
    keeps an abandoned request's slot and blocks (the simulated engine's leak on abort): cancel-storm, which passed
    the night before, fails by zombie_requests and closes the gate (exit 1), while steady passes both nights; the
    baseline stays the last open night's. Every night writes to the same directory, as a nightly job does."""
    loadrepro = f"{sys.executable} -m loadrepro"

    def night(leak: bool) -> subprocess.CompletedProcess[str]:
        engine = f"{loadrepro} sim --scenario healthy {'--leak-on-abort ' if leak else ''}--port {{port}}"
        env = {**os.environ, "LOADREPRO": loadrepro, "OUT": "nightly-stress", "BASELINE": "baseline",
               "NEXT_BASELINE": "baseline", "PHASES": "steady,cancel-storm", "ENGINE_CMD": engine}
        return subprocess.run(["bash", str(ROOT / "examples" / "ci" / "stress-nightly.sh")], env=env,
                              capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)

    first = night(leak=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "loadrepro gate" not in first.stdout
    kept = (tmp_path / "baseline" / "stress.json").read_text()
    assert [p["verdict"] for p in json.loads(kept)["phases"]] == ["pass", "pass"]
    same = night(leak=False)
    assert same.returncode == 0 and "loadrepro gate exited 0" in same.stdout, same.stdout + same.stderr
    kept = (tmp_path / "baseline" / "stress.json").read_text()
    leaking = night(leak=True)
    assert leaking.returncode == 1, leaking.stdout + leaking.stderr
    assert "closed by phase cancel-storm: pass -> fail (zombie_requests)" in leaking.stdout
    gate = json.loads((tmp_path / "nightly-stress" / "gate" / "gate.json").read_text())
    assert [c["figure"] for c in gate["checks"] if c["closed"]] == ["phase cancel-storm"]
    assert (tmp_path / "baseline" / "stress.json").read_text() == kept
