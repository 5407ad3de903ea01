"""The runs of one command (trials, sweep levels) plan a workload once per engine: a second trial of the same
workload against the same target sends it no counting requests, and runs the same bytes; a trial with another
seed is planned (and counted) again."""

from __future__ import annotations

import json

import pytest

import loadrepro
from loadrepro.load.planning import REUSED
from loadrepro.workload.export import WORKLOAD_FILE, open_workload_bytes
from tests.netservers import RawServer

# The server has no tokenize endpoint: lengths are counted with salted probe requests, told by their salt.
SALT = "calibration "
SMALL = ["workload.conversations=4", "workload.turns=2", "workload.prefix_tokens=600", "workload.turn_tokens=40",
         "workload.max_tokens=8", "workload.warm_max_tokens=8", "load.concurrency=2"]


def is_probe(body: dict) -> bool:
    return SALT in str(body.get("messages") or body.get("prompt"))


def probes_by_trial(server: RawServer) -> list[int]:
    """Probes before the first trial's load, and after it started (the second trial's): the server keeps bodies in
    arrival order, and the trials ran one after the other."""
    bodies = server.counters.received
    load_began = next(i for i, body in enumerate(bodies) if not is_probe(body))
    return [sum(map(is_probe, bodies[:load_began])), sum(map(is_probe, bodies[load_began:]))]


def workload_bytes(trial_dir) -> bytes:
    with open_workload_bytes(trial_dir / WORKLOAD_FILE) as packed:
        return packed.read()


@pytest.mark.timeout(300)
def test_a_second_trial_of_the_same_workload_is_not_counted_again(tmp_path):
    server = RawServer()
    with server.running():
        report = loadrepro.run("quickstart", base_url=server.url, trials=2, overrides=SMALL, out=tmp_path / "same")
    assert report.trials is not None and report.trials.n == 2, report.reasons
    first, second = probes_by_trial(server)
    assert first > 0 and second == 0, (first, second)  # the first trial counted by probes, the second did not
    assert server.counters.requests == first + 2 * 8
    same = tmp_path / "same"
    assert workload_bytes(same / "trial-01") == workload_bytes(same / "trial-02")
    reports = [json.loads((same / trial / "report.json").read_text()) for trial in ("trial-01", "trial-02")]
    assert [r["calibration"]["probe_requests"] for r in reports] == [first, 0]  # each says what it sent
    assert not any(REUSED in n for n in reports[0]["notes"]) and REUSED in reports[1]["notes"]


@pytest.mark.timeout(300)
def test_a_trial_with_another_seed_is_counted_again(tmp_path):
    server = RawServer()
    with server.running():
        report = loadrepro.run("quickstart", base_url=server.url, trials=2, vary_seed=True, overrides=SMALL,
                               out=tmp_path / "varied")
    assert report.trials is not None and report.trials.n == 2, report.reasons
    first, second = probes_by_trial(server)
    assert first > 0 and second > 0, (first, second)  # another workload: counted again
    assert server.counters.requests == first + second + 2 * 8
    varied = tmp_path / "varied"
    assert workload_bytes(varied / "trial-01") != workload_bytes(varied / "trial-02")
