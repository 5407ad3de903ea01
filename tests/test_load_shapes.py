"""Load shapes ([load] arrival = bursts, series, zigzag, poisson) and fresh connections: the start offsets each
shape draws from the seed, how they divide over workers, the keys' checks, and runs through the real client."""

from __future__ import annotations

import asyncio
import itertools
import json

import numpy as np
import pytest

from loadrepro import api
from loadrepro.config.profile import LoadSpec
from loadrepro.config.profile_files import load_profile, write_profile
from loadrepro.errors import ProfileError, UsageError
from loadrepro.load.backend.processes import split
from loadrepro.load.shapes import POISSON_STREAM, shape_words, start_offsets, zigzag_rate
from loadrepro.runs.run_options import RunOptions
from loadrepro.runs.session import run_session
from loadrepro.runs.sweeps import at_level
from loadrepro.workload.plan import plan_workload
from loadrepro.workload.tokens import SimTokenCounter
from tests.helpers import cli
from tests.netservers import RawServer

SEED = 7


def offsets(count: int, worker: tuple[int, int] | None = None, **keys: object) -> list[float]:
    return list(itertools.islice(start_offsets(LoadSpec.model_validate(keys), SEED, worker), count))


def test_bursts_start_at_exactly_their_times():
    starts = offsets(10, arrival="bursts", burst_size=4, burst_every_s=0.5, idle_s=2.0)
    assert starts == [2.0] * 4 + [2.5] * 4 + [3.0] * 2
    assert offsets(9, arrival="bursts") == [0.0] * 8 + [1.0]  # the defaults: 8 at once, every second, no idle


def test_poisson_draws_the_gaps_it_drew_before_from_the_seed():
    """The same seed gives the same Poisson starts as before the shapes: one stream of exponential gaps."""
    rng = np.random.default_rng([SEED, POISSON_STREAM])
    before = np.cumsum(rng.exponential(1 / 3.0, 600)).tolist()
    assert offsets(600, arrival="poisson", rate=3.0) == pytest.approx(before, rel=1e-12)


def test_a_series_starts_each_steps_rate_in_turn_and_keeps_the_last():
    rates = [{"seconds": 20, "rate": 5.0}, {"seconds": 10, "rate": 0.0}, {"seconds": 20, "rate": 40.0},
             {"seconds": 10, "rate": 2.0}]
    starts = np.array(offsets(3000, arrival="series", rates=rates))
    assert np.all(np.diff(starts) >= 0)
    edges = [0, 20, 30, 50, 60, 160]
    counts = np.histogram(starts, bins=edges)[0].tolist()
    expected = [100, 0, 800, 20, 200]  # the last step's 2/s goes on after its 10 s
    assert counts[1] == 0  # the pause
    for got, mean in zip(counts, expected, strict=True):
        assert abs(got - mean) <= 4 * mean ** 0.5, (counts, expected)  # within 4 standard deviations


def test_a_zigzag_is_denser_near_its_peak_than_its_trough():
    starts = np.array(offsets(4000, arrival="zigzag", rate_low=1.0, rate=20.0, period_s=4.0))
    phase = np.mod(starts / 4.0, 1.0)
    near_peak = np.sum(np.abs(phase - 0.5) < 0.125)  # a quarter of each period around its middle
    near_trough = np.sum((phase < 0.125) | (phase > 0.875))
    assert near_peak > 3 * near_trough, (near_peak, near_trough)
    assert zigzag_rate(np.array([0.0, 1.0, 2.0, 4.0]), 1.0, 20.0, 4.0).tolist() == [1.0, 10.5, 20.0, 1.0]
    # reproducible: the same seed, the same starts; another worker's stream, others
    assert offsets(50, arrival="zigzag", rate=20.0) == offsets(50, arrival="zigzag", rate=20.0)
    assert offsets(50, (1, 2), arrival="zigzag", rate=20.0) != offsets(50, arrival="zigzag", rate=20.0)


@pytest.mark.parametrize("keys,named", [
    ({"arrival": "poisson", "rate": 1.0, "rates": [{"seconds": 1, "rate": 1.0}]}, "rates is a key of arrival = 'ser"),
    ({"arrival": "closed", "burst_size": 4}, "burst_size is a key of arrival = 'bursts'"),
    ({"arrival": "series", "idle_s": 1.0, "rates": [{"seconds": 1, "rate": 1.0}]}, "idle_s is a key of arrival = 'b"),
    ({"arrival": "bursts", "period_s": 2.0}, "period_s is a key of arrival = 'zigzag'"),
    ({"arrival": "series"}, "needs rates"),
    ({"arrival": "series", "rates": [{"seconds": 1, "rate": 1.0}, {"seconds": 1, "rate": 0.0}]}, "last step's rate"),
    ({"arrival": "zigzag"}, "arrival = 'zigzag' needs rate > 0"),
    ({"arrival": "zigzag", "rate": 1.0, "rate_low": 2.0}, "rate_low (2) is above rate (1)"),
])
def test_a_shape_key_out_of_place_is_an_error_that_names_it(keys, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        LoadSpec.model_validate(keys)


def test_shape_keys_round_trip_through_a_written_profile(tmp_path):
    """A run's resolved profile.toml (unset keys left out) loads again, and with --set overrides too."""
    for keys in (["load.arrival='bursts'", "load.burst_size=3", "load.idle_s=1.5"],
                 ["load.arrival='series'", "load.rates=[{seconds=2, rate=0}, {seconds=3, rate=4.0}]"],
                 ["load.arrival='zigzag'", "load.rate=5", "load.period_s=2", "load.fresh_connections=true"],
                 []):
        profile = load_profile("quickstart", keys)
        again = load_profile(str(write_profile(profile, tmp_path / "p.toml")))
        assert again.load == profile.load
    with pytest.raises(ProfileError, match="burst_size is a key of arrival = 'bursts'"):
        load_profile("quickstart", ["load.burst_size=3"])


def test_the_shape_in_words():
    said = shape_words(LoadSpec(arrival="bursts", idle_s=2.0))
    assert said == "bursts of 8 conversations every 1 s after 2 s idle"
    series = LoadSpec.model_validate({"arrival": "series", "rates": [{"seconds": 3, "rate": 2.0},
                                                                     {"seconds": 4, "rate": 8}]})
    assert "2/s for 3 s, 8/s for 4 s, then 8/s on" in shape_words(series)
    assert "a new connection per request" in shape_words(LoadSpec(fresh_connections=True))


async def test_each_shape_divides_over_workers_to_the_runs_own():
    profile = load_profile("healthy", ["workload.conversations=9", "load.concurrency=6"])
    workload = (await plan_workload(profile, SimTokenCounter())).workload
    burst = profile.load.model_copy(update={"arrival": "bursts", "burst_size": 5, "idle_s": 1.0})
    for count in (2, 3, 6):
        shares = split(burst, workload, count)
        # each worker starts its conversations at their times in the run's bursts: together, the run's bursts
        starts = {c.index: t for s in shares for c, t in zip(s.workload.conversations,
                                                             start_offsets(s.load, SEED, (s.index, s.count)))}
        assert [starts[i] for i in range(9)] == [1.0] * 5 + [2.0] * 4, count
    series = LoadSpec.model_validate({"arrival": "series", "rates": [{"seconds": 1, "rate": 6.0}], "concurrency": 6})
    assert [step.rate for step in split(series, workload, 3)[0].load.rates] == [2.0]
    zigzag = LoadSpec(arrival="zigzag", rate=6.0, rate_low=3.0, concurrency=6)
    assert [(s.load.rate, s.load.rate_low) for s in split(zigzag, workload, 3)] == [(2.0, 1.0)] * 3


def test_a_run_in_bursts_sends_its_requests_in_bursts(tmp_path):
    """The simulated engine: 12 one-turn conversations in bursts of 4 every 0.6 s; the requests' sent times form
    three groups of four, each group far tighter than the gap between them."""
    report = api.run("healthy", out=tmp_path, overrides=[
        "workload.conversations=12", "workload.turns=1", "workload.max_tokens=8", "load.concurrency=12",
        "load.arrival='bursts'", "load.burst_size=4", "load.burst_every_s=0.6"])
    assert report.passed, report.reasons
    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    sent = sorted(r["sent_ns"] / 1e9 for r in rows if r.get("kind") == "request")
    assert len(sent) == 12
    groups = [sent[i:i + 4] for i in range(0, 12, 4)]
    spreads = [g[-1] - g[0] for g in groups]
    gaps = [b[0] - a[-1] for a, b in itertools.pairwise(groups)]
    assert max(spreads) < 0.2 < min(gaps), (spreads, gaps)


def test_the_dry_run_says_the_shape():
    done = cli("run", "--profile", "quickstart", "--dry-run", "--set", "load.arrival='bursts'", "--set",
               "load.idle_s=2")
    assert done.returncode == 0, done.stderr
    assert "arrivals   bursts of 8 conversations every 1 s after 2 s idle" in done.stdout


# Four tokens a turn: the target's calibration probes ask for one, so a connection's load requests are told apart.
FRESH = ["workload.conversations=10", "workload.turns=3", "workload.max_tokens=4", "workload.warm_max_tokens=4",
         "load.concurrency=4", "load.request_timeout_s=30", "load.stall_timeout_s=10", "watch.metrics_path=''",
         "model='raw'"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fresh", [True, False])
def test_fresh_connections_send_each_request_on_a_connection_of_its_own(fresh, tmp_path):
    server = RawServer("keep_alive")
    profile = load_profile("quickstart", [*FRESH, f"load.fresh_connections={str(fresh).lower()}",
                                          "workload.stream=0.5"])  # both streamed and whole answers
    with server.running():
        session = asyncio.run(run_session(RunOptions(profile, server.url, None, "run", tmp_path, quiet=True),
                                          say=lambda text: None))
    assert session.report.verdict == "pass", session.report.reasons
    load = [bodies for bodies in server.counters.by_connection if any(b["max_tokens"] == 4 for b in bodies)]
    requests = sum(len(bodies) for bodies in load)
    assert requests == len(session.result.records) == 30
    assert {b.get("stream", False) for bodies in load for b in bodies} == {True, False}
    if fresh:
        assert len(load) == requests  # one connection a request
    else:
        assert len(load) < requests / 2, len(load)  # kept alive: about one a slot of the 4


def test_a_soak_in_bursts_keeps_bursting_until_its_duration(tmp_path):
    report = api.run("healthy", out=tmp_path, overrides=[
        "workload.conversations=3", "workload.turns=1", "workload.max_tokens=4", "load.concurrency=8",
        "load.arrival='bursts'", "load.burst_size=3", "load.burst_every_s=0.5", "load.duration_s=1.2"])
    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    sent = sorted(r["sent_ns"] / 1e9 for r in rows if r.get("kind") == "request")
    groups = [list(g) for _, g in itertools.groupby(sent, key=lambda t, first=sent[0]: round((t - first) / 0.5))]
    assert len(groups) >= 2 and all(len(g) == 3 for g in groups), (report.reasons, sent)  # 0, 0.5, 1.0 s


def test_a_sweep_over_rate_refuses_a_shape_without_one_rate():
    """A rate sweep of bursts or a series would run the same load at every level: refused, saying why."""
    for keys in (["load.arrival='bursts'"], ["load.arrival='series'", "load.rates=[{seconds=1, rate=2.0}]"]):
        with pytest.raises(UsageError, match="does not use"):
            at_level(load_profile("quickstart", keys), "rate", 4.0)
    zigzag = at_level(load_profile("quickstart", ["load.arrival='zigzag'", "load.rate=2"]), "rate", 4.0)
    assert (zigzag.load.arrival, zigzag.load.rate) == ("zigzag", 4.0)


@pytest.mark.slow
def test_two_worker_processes_send_the_runs_bursts(tmp_path):
    """--workers 2: each worker starts its conversations at their places in the run's bursts; together the requests
    go out in the run's bursts of 6, not in bursts of 3 per worker at other times."""
    done = cli("run", "--profile", "healthy", "--workers", "2", "--out", str(tmp_path), "--quiet",
               *[f"--set={key}" for key in ("workload.conversations=12", "workload.turns=1", "workload.max_tokens=8",
                                            "load.concurrency=12", "load.arrival='bursts'", "load.burst_size=6",
                                            "load.burst_every_s=0.8")])
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    sent = sorted(r["sent_ns"] / 1e9 for r in rows if r.get("kind") == "request")
    groups = [sent[:6], sent[6:]]
    assert len(sent) == 12
    assert max(g[-1] - g[0] for g in groups) < 0.3 < sent[6] - sent[5], sent


def test_agent_sessions_start_in_the_shape_as_conversations_do(tmp_path):
    """kind = "agents" (no times of their own): each agent starts at its place in the bursts, its subagents once
    the turns that spawn them answered, as a soak of them already did."""
    from tests.test_agent_sessions import _profile, _sent

    profile = _profile("load.arrival='bursts'", "load.burst_size=1", "load.burst_every_s=0.6",
                       "workload.agents.subagent_probability=0")
    workload, got = _sent(tmp_path, profile)
    firsts = sorted(got[(c.index, 1)].arrived_ns for c in workload.conversations if c.tree is None)
    assert len(firsts) == 2 and firsts[1] - firsts[0] >= 0.6e9 - 5e6  # the second burst, not at once
