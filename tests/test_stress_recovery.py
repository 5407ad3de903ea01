"""The stress battery's ramp-recovery phase against an engine of bounded throughput (tests/overload_server.py, four
slots, 20 ms a token): twice steady's rate for two windows makes it a queue. One that drains that queue once the
load falls back passes; one that stays slow for good after it (--stuck: +1 s before every first token once more
than eight requests waited) fails rule degradation. And the rule itself: the drain of a run's last slow requests,
a window of its own with a few of them, does not hide the growth the windows before it show."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loadrepro.judge.soak import degradation
from tests.builders import ruled
from tests.helpers import ROOT, cli
from tests.test_statistics import SPEC, steady_run


def _battery(tmp_path: Path, *engine: str) -> tuple[int, dict[str, dict[str, Any]]]:
    command = f"{sys.executable} {ROOT / 'tests' / 'overload_server.py'} --port {{port}} " + " ".join(engine)
    done = cli("stress", "--phases", "steady,ramp-recovery", "--engine-cmd", command, "--out", str(tmp_path))
    battery = json.loads((tmp_path / "stress.json").read_text())
    return done.returncode, {p["name"]: p for p in battery["phases"]}


@pytest.mark.slow
def test_an_engine_that_stays_slow_after_overload_fails_ramp_recovery_on_degradation(tmp_path):
    code, phases = _battery(tmp_path, "--stuck")
    assert phases["steady"]["verdict"] == "pass", phases["steady"]
    assert phases["ramp-recovery"]["verdict"] == "fail", phases["ramp-recovery"]
    assert "degradation" in phases["ramp-recovery"]["rules_fired"], phases["ramp-recovery"]
    assert code == 1


@pytest.mark.slow
def test_an_engine_that_drains_its_backlog_passes_ramp_recovery(tmp_path):
    code, phases = _battery(tmp_path)
    assert phases["steady"]["verdict"] == "pass", phases["steady"]
    ramp = phases["ramp-recovery"]
    assert ramp["verdict"] == "pass" and ramp["rules_fired"] == [], ramp
    report = json.loads((Path(ramp["run_dir"]) / "report.json").read_text())
    assert max(w["waiting_max"] or 0 for w in report["windows"]) > 8, report["windows"]  # it did queue
    assert code == 0


def test_a_drain_window_of_a_few_slow_requests_does_not_hide_degradation():
    """Windows of nine requests, the last two windows' eleven times slower than the reference's, then the run's
    two last requests ending in a window of their own: the last window with five first tokens is compared."""
    found = ruled(degradation, steady_run([900.0, 100.0, 100.0, 1100.0, 1100.0, [1100.0, 1100.0]]), SPEC)
    assert found is not None and "to 1,10" in found.summary and "in window 5 (12-15 s)" in found.summary, found


def test_a_drain_window_of_a_few_slow_requests_after_steady_windows_is_not_degradation():
    assert ruled(degradation, steady_run([900.0, 100.0, 100.0, 100.0, [1100.0, 1100.0]]), SPEC) is None
