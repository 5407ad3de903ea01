"""`compare BASELINE RUN --gate` of two stress batteries (stress.json), phase by phase, and of two release matrices
(matrix.json), build by build: closed (exit 1) only by a phase that passed in BASELINE and fails in RUN; a phase
that failed in both, skips now or is in one only is said and leaves it open. The files are written by hand, as a
nightly job's two nights would have left them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadrepro.compare.stress_gate import Change, matrix_gate, stress_gate
from loadrepro.schema.stress_report import MatrixReport, StressReport
from tests.helpers import cli


def _phase(name: str, verdict: str, rules: tuple[str, ...] = (), reason: str = "") -> dict[str, Any]:
    return {"name": name, "verdict": verdict, "reasons": [reason] if reason else [f"{r} fired" for r in rules],
            "rules_fired": list(rules), "traffic": f"the {name} traffic",
            "run_dir": None if verdict == "skip" else f"night/{name}", "requests": 0 if verdict == "skip" else 12}


def _battery(*phases: dict[str, Any], label: str = "tonight", interrupted: bool = False) -> dict[str, Any]:
    failing = [p["name"] for p in phases if p["verdict"] == "fail"]
    return {"schema": "loadrepro.stress/1", "label": label, "target": "the embedded simulated engine",
            "fresh_engine": True, "command": "loadrepro stress", "capabilities": None, "phases": list(phases),
            "first_failure": failing[0] if failing else None, "wall_s": 9.5, "interrupted": interrupted, "notes": []}


def _write(path: Path, data: dict[str, Any], name: str = "stress.json") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(json.dumps(data))
    return path


STEADY, BURST = _phase("steady", "pass"), _phase("burst", "pass")
BURST_DIED = _phase("burst", "fail", ("engine_death", "post_run_health"))


def test_a_phase_that_passed_and_fails_now_closes_the_gate_and_is_named_with_its_rules(tmp_path):
    before = _write(tmp_path / "last", _battery(STEADY, BURST))
    now = _write(tmp_path / "tonight", _battery(STEADY, BURST_DIED))
    done = cli("compare", str(before / "stress.json"), str(now / "stress.json"), "--gate")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "# loadrepro gate: CLOSED" in done.stdout
    assert "closed by phase burst: pass -> fail (engine_death, post_run_health)" in done.stdout
    assert "| phase steady | pass | pass | passed in both | open |" in done.stdout


def test_the_same_battery_twice_keeps_the_gate_open(tmp_path):
    battery = _battery(STEADY, BURST, _phase("priority", "skip", reason="loadrepro does not send priority classes"))
    done = cli("compare", str(_write(tmp_path / "a", battery)), str(_write(tmp_path / "b", battery)), "--gate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "open: no phase that passed in BASELINE fails in RUN" in done.stdout
    assert "skipped in both" in done.stdout


def test_a_phase_that_failed_in_both_is_said_and_keeps_the_gate_open(tmp_path):
    worse = _phase("burst", "fail", ("engine_death", "zombie_requests"))
    before = _write(tmp_path / "a", _battery(STEADY, BURST_DIED))
    now = _write(tmp_path / "b", _battery(STEADY, worse))
    done = cli("compare", str(before), str(now), "--gate", "--out", str(tmp_path / "gate"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failing in both, not gated: phase burst" in done.stdout
    assert "failed in both; in RUN also by zombie_requests" in done.stdout
    gate = json.loads((tmp_path / "gate" / "gate.json").read_text())
    assert gate["passed"] is True and (tmp_path / "gate" / "gate.md").read_text().startswith("# loadrepro gate: open")


def test_a_phase_that_ran_before_and_skips_now_is_said_as_lost_coverage_and_keeps_the_gate_open(tmp_path):
    skipped = _phase("burst", "skip", reason="the target died in phase steady")
    before = _write(tmp_path / "a", _battery(STEADY, BURST))
    now = _write(tmp_path / "b", _battery(STEADY, skipped, interrupted=True))
    done = cli("compare", str(before), str(now), "--gate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "coverage lost: phase burst ran in BASELINE and did not run in RUN" in done.stdout
    assert "RUN was interrupted" in done.stdout
    assert "skip (the target died in phase steady)" in done.stdout


def test_phases_in_one_battery_only_are_said_and_gate_nothing():
    gate = stress_gate(StressReport.model_validate(_battery(STEADY, BURST)),
                       StressReport.model_validate(_battery(STEADY, _phase("mine", "fail", ("slo",)))))
    assert gate.passed
    by_figure = {c.figure: c for c in gate.checks}
    assert by_figure["phase mine"].change.startswith(Change.NEW.value) and "fails" in by_figure["phase mine"].change
    assert by_figure["phase burst"].change == Change.GONE.value
    assert [c.figure for c in gate.checks] == ["phase steady", "phase mine", "phase burst"]


@pytest.mark.parametrize(("before", "now", "closed"), [
    ("pass", "fail", True),
    ("pass", "pass", False),
    ("fail", "fail", False),
    ("fail", "pass", False),
    ("pass", "skip", False),
    ("skip", "fail", False),  # no verdict of the baseline's to hold it to: said, not gated
])
def test_only_pass_to_fail_closes(before, now, closed):
    def battery(verdict: str) -> StressReport:
        return StressReport.model_validate(_battery(_phase("burst", verdict, ("engine_death",) if verdict == "fail"
                                                           else ())))
    gate = stress_gate(battery(before), battery(now))
    assert gate.passed is not closed
    assert [c.closed for c in gate.checks] == [closed]


def _matrix(*builds: tuple[str, dict[str, str]]) -> dict[str, Any]:
    return {"schema": "loadrepro.stress-matrix/1", "command": "loadrepro stress --engine-cmd ...",
            "phases": ["steady", "burst"], "wall_s": 20.0, "interrupted": False,
            "builds": [{"label": label, "engine_cmd": f"serve-{label} {{port}}", "stress_dir": f"m/{label}",
                        "verdicts": verdicts,
                        "rules": {p: ["engine_death"] for p, v in verdicts.items() if v == "fail"},
                        "first_failure": next((p for p, v in verdicts.items() if v == "fail"), None), "wall_s": 10.0}
                       for label, verdicts in builds]}


def test_two_matrices_are_gated_build_by_build(tmp_path):
    ok = {"steady": "pass", "burst": "pass"}
    broke = {"steady": "pass", "burst": "fail"}
    before = _write(tmp_path / "a", _matrix(("b1", ok), ("b2", broke)), "matrix.json")
    same = _write(tmp_path / "b", _matrix(("b1", ok), ("b2", broke)), "matrix.json")
    worse = _write(tmp_path / "c", _matrix(("b1", broke), ("b2", broke), ("b3", ok)), "matrix.json")
    assert cli("compare", str(before), str(same), "--gate").returncode == 0
    done = cli("compare", str(before / "matrix.json"), str(worse / "matrix.json"), "--gate")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "closed by b1: phase burst: pass -> fail (engine_death)" in done.stdout
    gate = matrix_gate(MatrixReport.model_validate(_matrix(("b1", ok), ("b2", broke))),
                       MatrixReport.model_validate(_matrix(("b1", broke), ("b2", broke), ("b3", ok))))
    assert [c.figure for c in gate.checks if c.closed] == ["b1: phase burst"]
    assert "b2: phase burst" in gate.detail and any(c.figure == "build b3" for c in gate.checks)


def test_batteries_are_refused_without_gate_with_a_history_or_beside_a_run(tmp_path):
    a = _write(tmp_path / "a", _battery(STEADY))
    b = _write(tmp_path / "b", _battery(STEADY))
    matrix = _write(tmp_path / "m", _matrix(("b1", {"steady": "pass"})), "matrix.json")
    assert cli("compare", str(a), str(b)).returncode == 2
    assert cli("compare", str(a), str(b), "--gate", "--history", str(tmp_path)).returncode == 2
    assert cli("compare", str(a), str(matrix), "--gate").returncode == 2
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_text("{}")
    refused = cli("compare", str(a), str(run), "--gate")
    assert refused.returncode == 2 and "two of a kind" in refused.stderr


def test_a_phase_no_build_reached_in_an_interrupted_matrix_is_said_and_gates_nothing():
    before = _matrix(("b1", {"steady": "pass"}))
    now = {**_matrix(("b1", {"steady": "pass"})), "interrupted": True}
    gate = matrix_gate(MatrixReport.model_validate(before), MatrixReport.model_validate(now))
    assert gate.passed and "RUN was interrupted" in gate.detail
    assert {c.figure: c.change for c in gate.checks}["b1: phase burst"] == "in neither"
