"""`loadrepro sweep`: a run per level, the breaking point found by bisection (a server that breaks beyond its own
limit must be found to break exactly there; one that never breaks must hold at every level), both engines of an
A/B swept alike, the most load that met the SLO, and the files a reader opens."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadrepro.errors import UsageError
from loadrepro.runs.sweeps import _between, ladder
from tests.helpers import cli
from tests.interrupting import interrupted_when
from tests.sweep_server import OverloadServer

PROFILE = """
name = "sweep"
api = "chat"
[workload]
seed = 4
conversations = 24
turns = 1
prefix_tokens = 300
max_tokens = 4
[load]
concurrency = 1
max_retries = 0
request_timeout_s = 20
stall_timeout_s = 10
[watch]
metrics_path = ""
[slo]
ttft_ms = {ttft_ms}
min_attainment = 0.9
"""


def test_the_ladder_is_what_was_asked():
    assert ladder("concurrency", "1,2,4", None, None, 2.0) == [1.0, 2.0, 4.0]
    assert ladder("concurrency", None, 1, 16, 2.0) == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert ladder("concurrency", None, 1, 10, 2.0) == [1.0, 2.0, 4.0, 8.0, 10.0]  # the top is always a level
    assert ladder("rate", None, 0.5, 2, 2.0) == [0.5, 1.0, 2.0]
    assert ladder("rate", "4,1.5", None, None, 2.0) == [1.5, 4.0]
    for bad in ("1,2.5", "0,2", "a,b"):
        with pytest.raises(UsageError):
            ladder("concurrency", bad, None, None, 2.0)
    assert _between("concurrency", 5, 6) is None and _between("concurrency", 4, 16) == 10
    assert _between("rate", 10, 10.5) is None and _between("rate", 1, 4) == 2.0


def sweep(tmp_path, tokenizer_dir, server: OverloadServer, values: str, ttft_ms: float = 5000.0,
          *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    path = tmp_path / "sweep.toml"
    path.write_text(PROFILE.format(ttft_ms=ttft_ms))
    with server.running():
        done = cli("sweep", "--profile", str(path), "--values", values,
                               "--base-url", server.url, "--tokenizer", str(tokenizer_dir), "--out",
                               str(tmp_path / "sweep"), "--quiet", *extra)
    assert (tmp_path / "sweep" / "sweep.json").exists(), done.stdout + done.stderr
    return done, json.loads((tmp_path / "sweep" / "sweep.json").read_text())


def test_a_server_breaking_beyond_five_in_flight_is_found_to_break_at_six(tmp_path, tokenizer_dir):
    server = OverloadServer(limit=5)
    done, report = sweep(tmp_path, tokenizer_dir, server, "1,4,16")
    assert done.returncode == 1, done.stdout + done.stderr
    assert report["break"]["last_pass"] == 5 and report["break"]["first_fail"] == 6, report["break"]
    values = [(lv["value"], lv["verdict"], lv["bisected"]) for lv in report["levels"]]
    assert values[:3] == [(1, "pass", False), (4, "pass", False), (5, "pass", True)], values
    assert (16, "fail", False) in values and (6, "fail", True) in values
    assert report["slo_capacity"] == 5  # the most load that met the SLO, below the breaking point
    assert "run breaks at 6 requests in flight" in report["conclusion"]
    assert any("the same target" in note for note in report["notes"])
    for name in ("sweep.md", "sweep.html"):
        assert (tmp_path / "sweep" / name).stat().st_size > 0
    assert "data-loadrepro-chart=sweep:sweep" in (tmp_path / "sweep" / "sweep.html").read_text()
    md = (tmp_path / "sweep" / "sweep.md").read_text()
    assert "| 6 (bisected) | fail |" in md and "breaking point: first failed at 6 requests in flight" in md
    level = json.loads((tmp_path / "sweep" / "level-6" / "report.json").read_text())
    assert level["verdict"] == "fail" and level["profile"]["load"]["concurrency"] == 6


def test_a_server_that_never_breaks_holds_at_every_level(tmp_path, tokenizer_dir):
    server = OverloadServer(limit=None)
    done, report = sweep(tmp_path, tokenizer_dir, server, "1,4,16")
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["break"] is None and [lv["verdict"] for lv in report["levels"]] == ["pass"] * 3
    assert server.most == 16 and "run holds through 16 requests in flight" in report["conclusion"]


def test_the_slo_capacity_is_the_most_load_whose_requests_met_it(tmp_path, tokenizer_dir):
    """No failure, but the first token comes after 200 ms of thinking: an SLO of 150 ms is met by no level."""
    done, report = sweep(tmp_path, tokenizer_dir, OverloadServer(limit=None), "1,2", 150.0)
    assert done.returncode == 0 and report["slo_capacity"] is None and report["break"] is None
    assert all(lv["slo"]["attainment"] == 0.0 for lv in report["levels"])


def test_a_rate_the_client_could_not_send_on_time_is_said_to_be_the_clients(tmp_path, tokenizer_dir):
    """A concurrency cap of 4 against 200 ms answers sends 20 a second at most: 60 arrivals a second wait in
    loadrepro (client-bound); 2 a second do not."""
    done, report = sweep(tmp_path, tokenizer_dir, OverloadServer(limit=None), "2,60", 5000.0, "--over", "rate",
                         "--set", "workload.conversations=12", "--set", "load.concurrency=4")
    assert done.returncode == 0, done.stdout + done.stderr
    bound = {lv["value"]: lv["client_bound"] for lv in report["levels"]}
    assert bound[2] is None, bound
    assert bound[60] is not None and "concurrency cap of 4" in bound[60], bound


SIM = ("{python} -m loadrepro sim --scenario draft-pool --policy {policy} --block-size 16 --primary-blocks 4096 "
       "--draft-blocks 3100 --max-model-len 16384 --port {{port}}")


@pytest.mark.slow
def test_stock_and_patched_simulated_engines_are_swept_alike(tmp_path):
    """quickstart's stock engine dies once 12 follow-ups decode at once; the patched one holds."""
    done = cli("sweep", "--profile", "quickstart", "--values", "4,12",
                           "--no-bisect", "--quiet", "--out", str(tmp_path / "ab"),
                           "--stock-cmd", SIM.format(python=sys.executable, policy="stock"),
                           "--patched-cmd", SIM.format(python=sys.executable, policy="patched"))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "ab" / "sweep.json").read_text())
    assert report["stock"]["break"]["first_fail"] == 12 and report["stock"]["break"]["last_pass"] == 4
    assert report["stock"]["break"]["rule"].startswith("engine_death")
    assert report["break"] is None and report["label"] == "patched"
    assert report["conclusion"] == ("stock breaks at 12 requests in flight (engine_death), after passing 4; patched "
                                    "holds through 12 requests in flight")
    assert (tmp_path / "ab" / "stock" / "level-12" / "report.json").exists()


@pytest.mark.slow
def test_the_most_load_that_met_the_slo_is_bisected_to(tmp_path, tokenizer_dir):
    """One request served at a time, 100 ms each: the first token comes after about (requests in flight) x 100 ms,
    so a TTFT SLO of 550 ms is met at 5 in flight and missed at 6; nothing breaks."""
    server = OverloadServer(limit=None, think_s=0.1, serial=True)
    done, report = sweep(tmp_path, tokenizer_dir, server, "1,4,16", 550.0)
    assert done.returncode == 0 and report["break"] is None, done.stdout + done.stderr
    assert report["slo_capacity"] == 5, [(lv["value"], lv["slo"]["attainment"]) for lv in report["levels"]]
    assert {5.0, 6.0} <= {lv["value"] for lv in report["levels"] if lv["bisected"]}


@pytest.mark.slow
def test_ctrl_c_keeps_the_levels_that_ran(tmp_path, tokenizer_dir):
    """SIGINT while the third level runs: sweep.json and sweep.md list the levels before it (and the one it
    stopped), say it was interrupted, and the command exits 130."""
    _interrupted_sweep(tmp_path, tokenizer_dir, OverloadServer(limit=None, think_s=0.3),
                       lambda: (tmp_path / "sweep" / "level-4").exists())  # the third level's run directory
    report = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert report["interrupted"] and [lv["value"] for lv in report["levels"]][:2] == [1, 2]
    assert 8 not in [lv["value"] for lv in report["levels"]]
    assert "interrupted" in (tmp_path / "sweep" / "sweep.md").read_text()


def test_ctrl_c_between_runs_keeps_the_levels_that_ran(tmp_path, tokenizer_dir):
    """SIGINT while the third level plans (the server holds its question for the model's name), outside any load:
    sweep.json and sweep.md still list the two levels that ran and say it was interrupted; the command exits 130."""
    server = OverloadServer(limit=None, think_s=0.05, hold_models_after=48)  # two levels of 24 requests
    _interrupted_sweep(tmp_path, tokenizer_dir, server, server.held.is_set)
    report = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert report["interrupted"] and [lv["value"] for lv in report["levels"]] == [1, 2], report["levels"]
    assert "interrupted" in (tmp_path / "sweep" / "sweep.md").read_text()


def _interrupted_sweep(tmp_path, tokenizer_dir, server: OverloadServer, ready) -> None:
    """A sweep of levels 1, 2, 4, 8 against `server`, sent SIGINT once `ready()`: it must exit 130."""
    path = tmp_path / "sweep.toml"
    path.write_text(PROFILE.format(ttft_ms=5000.0))
    with server.running():
        code, output = interrupted_when(["sweep", "--profile", str(path), "--values", "1,2,4,8", "--base-url",
                                         server.url, "--tokenizer", str(tokenizer_dir), "--out",
                                         str(tmp_path / "sweep"), "--quiet"], ready)
    assert code == 130, output
