"""Replicas ([target] replicas, --base-url given more than once): the load spread over them in turn or by
conversation, each one's figures in report.json `endpoints`, and the death of one while the others serve judged
by its own /health (replica_death), the run going on; a replica's failures are not read against the target's
/health, and one down a while and back is not a death."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections import defaultdict

import pytest

import loadrepro
from loadrepro.config.defaults import SIM_IN_PROCESS_ENV
from loadrepro.config.profile_files import load_profile
from loadrepro.errors import UsageError
from loadrepro.load.routed_turns import RoutedTurns
from tests.builders import record
from tests.helpers import rebuilt_alike, rule
from tests.stub_server import StubServer

PROFILE = """
name = "replicas"
api = "chat"
[workload]
seed = 5
conversations = {conversations}
turns = {turns}
prefix_tokens = 200
max_tokens = 8
[load]
concurrency = 4
request_timeout_s = 20
stall_timeout_s = 10
[watch]
metrics_path = ""
health_interval_s = 0.2
[target]
routing = "{routing}"
"""


def run(tmp_path, tokenizer_dir, servers: list[StubServer], routing: str = "round_robin", conversations: int = 40,
        turns: int = 1, png: bool = False):
    path = tmp_path / "replicas.toml"
    path.write_text(PROFILE.format(routing=routing, conversations=conversations, turns=turns))
    return loadrepro.run(path, base_url=[s.url for s in servers], tokenizer=tokenizer_dir, out=tmp_path / "run",
                         png=png)


def records(tmp_path) -> list[dict]:
    lines = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind", "request") == "request"]


def test_round_robin_spreads_the_load_and_reports_each_replica(tmp_path, tokenizer_dir):
    a, b = StubServer(tokens=8, token_delay_s=0.005), StubServer(tokens=8, token_delay_s=0.005)
    with a.running(), b.running():
        report = run(tmp_path, tokenizer_dir, [a, b])
    assert report.passed, report.reasons
    first, second = report.endpoints
    assert (first.name, first.url, second.name, second.url) == ("replica-0", a.url, "replica-1", b.url)
    streamed = [sum(1 for body in s.stats.bodies if body.get("stream")) for s in (a, b)]
    assert (first.requests, second.requests) == (20, 20) == tuple(streamed), streamed
    assert first.by_outcome == second.by_outcome == {"ok": 20}
    assert first.ttft_ms.p50 is not None and second.ttft_ms.p95 is not None
    assert first.health.pre == second.health.pre == 200 and second.health.post == 200
    assert first.died_at_s is second.died_at_s is None and not rule(report, "replica_death").fired
    assert b.stats.health_polls >= 2  # the replica's own /health was watched
    assert "## Replicas" in (tmp_path / "run" / "report.md").read_text()


def test_session_routing_keeps_every_turn_of_a_conversation_on_one_replica(tmp_path, tokenizer_dir):
    a, b = StubServer(tokens=8), StubServer(tokens=8)
    with a.running(), b.running():
        report = run(tmp_path, tokenizer_dir, [a, b], routing="session", conversations=6, turns=3)
    assert report.passed, report.reasons
    where: dict[int, set[int]] = defaultdict(set)
    for r in records(tmp_path):
        where[r["conversation"]].add(r["replica"])
    assert len(where) == 6 and all(len(replicas) == 1 for replicas in where.values()), where
    assert {next(iter(r)) for r in where.values()} == {0, 1}
    # what each server saw: three turns of each of its conversations, the later ones longer
    assert sum(1 for body in a.stats.bodies if body.get("stream")) == 9 == report.endpoints[0].requests


def test_a_replica_that_dies_while_the_other_serves_fails_replica_death_and_the_run_goes_on(tmp_path, tokenizer_dir,
                                                                                                 pictures):
    a, b = StubServer(tokens=8, token_delay_s=0.01), StubServer(tokens=8, token_delay_s=0.01, die_after=5)
    with a.running(), b.running():
        report = run(tmp_path, tokenizer_dir, [a, b], conversations=60, png=True)
    found = rule(report, "replica_death")
    assert not report.passed and found.fired and found.severity == "fail", report.reasons
    assert found.detail.startswith(f"replica-1 ({b.url}) died at "), found.detail
    assert found.facts["replica"] == "replica-1" and found.facts["seen_by"] in ("health", "unreachable"), found.facts
    assert found.facts["served_after_by_others"] > 0, found.facts
    first, second = report.endpoints
    assert first.by_outcome == {"ok": 30} and first.died_at_s is None
    assert second.died_at_s is not None and second.by_outcome.get("server_error", 0) > 0
    assert report.requests.total == 60 and report.stop_reason == "done"  # every request sent: the run went on
    assert not rule(report, "engine_death").fired  # the target did not die
    fatal = rule(report, "fatal_signature").detail  # the dying replica's last words, said as whose they were
    assert " responses (replica-1: " in fatal and "replica-0" not in fatal, fatal
    # the dead replica's 500s are not told as the target failing while its own /health said 200
    assert not rule(report, "failures_while_healthy").fired, rule(report, "failures_while_healthy")
    assert (tmp_path / "run" / "timeline.png").stat().st_size > 0  # its /health drawn in the endpoints' panel
    rebuilt_alike(tmp_path / "run")


def test_the_timeline_draws_each_replicas_health(tmp_path, tokenizer_dir):
    from loadrepro.report.plots import timeline_figure
    from loadrepro.report.timeline import timeline_of
    from loadrepro.runs.run_options import RunOptions
    from loadrepro.runs.session import run_session

    a, b = StubServer(tokens=8, token_delay_s=0.02), StubServer(tokens=8, token_delay_s=0.02, die_after=3)
    path = tmp_path / "replicas.toml"
    path.write_text(PROFILE.format(routing="round_robin", conversations=40, turns=1))
    with a.running(), b.running():
        options = RunOptions(load_profile(str(path), [f'target.replicas=["{b.url}"]']), a.url, None, "run",
                             tmp_path / "run", quiet=True, tokenizer=tokenizer_dir, pictures=False)
        session = asyncio.run(run_session(options, say=lambda _: None))
    timeline = timeline_of(session.result)
    (series,) = timeline.endpoints
    assert series.name == "replica-1" and series.health_ok[0] == 1 and series.health_ok[-1] == 0, series
    # a lane each: the requests each replica was sent, as the records say
    sent = defaultdict(int)
    for r in session.result.records:
        sent[r.replica] += 1
    assert timeline.replicas == 2 and {i: sum(1 for lane in timeline.lanes if lane.replica == i) for i in (0, 1)} \
        == dict(sent)
    figure = timeline_figure([timeline])
    titles = [ax.get_title(loc="left") for ax in figure.axes]
    assert any(title.startswith("replicas: ") for title in titles), titles
    (lanes,) = [ax for ax in figure.axes if ax.get_title(loc="left").startswith("replicas: ")]
    assert [label.get_text() for label in lanes.get_yticklabels()] == ["replica-0", "replica-1"]


def test_a_replica_down_a_while_and_back_is_not_a_death(tmp_path, tokenizer_dir):
    class Blinking(StubServer):
        @property
        def flipped(self) -> bool:
            return 3 <= self.stats.health_polls <= 5  # three polls 503, then 200 again

    a, b = StubServer(tokens=8, token_delay_s=0.02), Blinking(tokens=8, token_delay_s=0.02)
    with a.running(), b.running():
        report = run(tmp_path, tokenizer_dir, [a, b], conversations=80)
    assert b.stats.health_polls > 6, b.stats.health_polls  # it came back while watched
    assert not rule(report, "replica_death").fired, rule(report, "replica_death")
    assert report.endpoints[1].died_at_s is None


def test_the_target_dying_while_a_replica_serves_goes_on_and_names_it(tmp_path, tokenizer_dir):
    a, b = StubServer(tokens=8, token_delay_s=0.01, die_after=5), StubServer(tokens=8, token_delay_s=0.01)
    with a.running(), b.running():
        report = run(tmp_path, tokenizer_dir, [a, b], conversations=60)
    assert rule(report, "engine_death").fired
    found = rule(report, "replica_death")
    assert found.fired and found.detail.startswith(f"replica-0 ({a.url}) died at "), found.detail
    assert found.facts["replica"] == "replica-0" and found.facts["served_after_by_others"] > 0, found.facts
    assert report.endpoints[1].by_outcome == {"ok": 30}
    assert report.requests.total == 60  # the load was not stopped while replica-1 served


def test_replicas_need_the_targets_url_first(tmp_path):
    with pytest.raises(UsageError, match="give the target's own URL first"):
        loadrepro.run("quickstart", overrides=['target.replicas=["http://127.0.0.1:9"]'], out=tmp_path)


def test_replicas_n_starts_the_engine_n_times_and_stops_each(tmp_path, tokenizer_dir, monkeypatch):
    monkeypatch.setenv(SIM_IN_PROCESS_ENV, "0")  # each replica a process of its own, as an engine command's are
    path = tmp_path / "replicas.toml"
    path.write_text(PROFILE.format(routing="session", conversations=6, turns=2))
    said: list[str] = []
    report = loadrepro.run(path, replicas=2, tokenizer=tokenizer_dir, out=tmp_path / "run", say=said.append)
    assert report.passed, report.reasons
    first, second = report.endpoints
    assert first.url != second.url and first.requests + second.requests == 12 and min(first.requests,
                                                                                      second.requests) > 0
    assert (tmp_path / "run" / "engine.log").exists() and (tmp_path / "run" / "engine-replica-1.log").exists()
    assert "engine: stopped by SIGTERM" in said and "replica-1: stopped by SIGTERM" in said, said
    with pytest.raises(UsageError, match="replicas already running are given by URL"):
        loadrepro.run(path, replicas=2, base_url="http://127.0.0.1:9", out=tmp_path / "no")


def test_a_replica_whose_health_starves_while_it_serves_is_not_dead(tmp_path, tokenizer_dir):
    """Its /health gives no answer while requests are in flight (a single-threaded frontend starved by the load)
    to the end of the load, yet it keeps completing requests: busy, not dead."""
    a = StubServer(tokens=8, token_delay_s=0.02)
    b = StubServer(tokens=8, token_delay_s=0.02, busy_health_delay_s=1.0)
    path = tmp_path / "replicas.toml"
    path.write_text(PROFILE.format(routing="round_robin", conversations=60, turns=1).replace(
        "health_interval_s = 0.2", "health_interval_s = 0.2\nhealth_timeout_s = 0.1"))
    with a.running(), b.running():
        report = loadrepro.run(path, base_url=[a.url, b.url], tokenizer=tokenizer_dir, out=tmp_path / "run")
    assert report.endpoints[1].health.post == "unreachable", report.endpoints[1]  # its last poll got no answer
    assert report.endpoints[1].by_outcome == {"ok": 30} and report.endpoints[1].died_at_s is None
    assert not rule(report, "replica_death").fired, rule(report, "replica_death")


def test_ab_takes_each_sides_replicas_by_url(tmp_path, tokenizer_dir):
    """Stock's second replica dies while its first serves; patched's two hold: replica_death fails stock alone."""
    from loadrepro.report.json import read_report

    path = tmp_path / "replicas.toml"
    path.write_text(PROFILE.format(routing="round_robin", conversations=60, turns=1))
    stock = [StubServer(tokens=8, token_delay_s=0.01), StubServer(tokens=8, token_delay_s=0.01, die_after=5)]
    patched = [StubServer(tokens=8, token_delay_s=0.01), StubServer(tokens=8, token_delay_s=0.01)]
    with stock[0].running(), stock[1].running(), patched[0].running(), patched[1].running():
        comparison = loadrepro.ab(path, stock_url=[s.url for s in stock], patched_url=[s.url for s in patched],
                                  out=tmp_path / "ab")
    before, after = (read_report(tmp_path / "ab" / side) for side in ("stock", "patched"))
    assert [e.url for e in before.endpoints] == [s.url for s in stock]
    assert [e.url for e in after.endpoints] == [s.url for s in patched]
    assert rule(before, "replica_death").fired and not rule(after, "replica_death").fired, after.reasons
    assert after.passed and [e.requests for e in after.endpoints] == [30, 30]
    assert comparison.fix_confirmed, comparison.detail
    with pytest.raises(UsageError, match="one --stock-url/--patched-url each"):
        loadrepro.ab(path, stock_url=stock[0].url, patched_url=patched[0].url, replicas=2, out=tmp_path / "no")


def test_ab_replicas_n_starts_each_sides_engine_n_times(tmp_path, tokenizer_dir):
    path = tmp_path / "replicas.toml"
    path.write_text(PROFILE.format(routing="session", conversations=6, turns=2))
    loadrepro.ab(path, replicas=2, out=tmp_path / "ab")
    from loadrepro.report.json import read_report

    for side in ("stock", "patched"):
        report = read_report(tmp_path / "ab" / side)
        first, second = report.endpoints
        assert first.url != second.url and first.requests + second.requests == 12, report.endpoints
        assert (tmp_path / "ab" / side / "engine-replica-1.log").exists()


def test_a_started_replica_that_crashes_is_named_with_its_exit_and_its_log(tmp_path, tokenizer_dir):
    """--replicas 2 of an engine of our own whose second start (replica-1) logs vLLM's fatal line and is killed
    by SIGSEGV after 5 answers: replica_death names its exit and quotes its log, the target serves on and is not
    dead, and the fatal line is said as replica-1's. The same engine without the crash: no death at all."""
    path = tmp_path / "replicas.toml"
    path.write_text(PROFILE.format(routing="round_robin", conversations=40, turns=1))
    engine = f"{sys.executable} -m tests.restart_server --port {{port}} --tokens 8 --delay 0.01"
    report = loadrepro.run(path, engine_cmd=f"{engine} --state {tmp_path / 'starts'} --crash-start 2", replicas=2,
                           tokenizer=tokenizer_dir, out=tmp_path / "run")
    found = rule(report, "replica_death")
    assert found.fired and found.detail.startswith("replica-1 (http://127.0.0.1:"), found.detail
    assert found.facts["exit_code"] == -11 and found.facts["seen_by"].startswith("exit"), found.facts
    assert found.facts["seen_by"].endswith("+log") and "EngineCore encountered an issue" in found.detail, found
    assert not rule(report, "engine_death").fired, rule(report, "engine_death")
    fatal = rule(report, "fatal_signature").detail
    assert fatal.count("replica-1's engine log line ") == 1 and "replica-0" not in fatal, fatal
    first = report.endpoints[0]
    assert first.died_at_s is None and first.by_outcome.get("ok", 0) >= 20, first  # half the load at least
    assert "EngineCore encountered an issue" in report.log_excerpt[-1]
    rebuilt_alike(tmp_path / "run")
    calm = loadrepro.run(path, engine_cmd=f"{engine} --state {tmp_path / 'calm-starts'}", replicas=2,
                         tokenizer=tokenizer_dir, out=tmp_path / "calm")
    assert calm.passed, calm.reasons
    assert all(e.died_at_s is None for e in calm.endpoints) and not rule(calm, "replica_death").fired


@pytest.mark.parametrize("workers", [1, 2])
def test_the_targets_running_count_is_read_against_its_own_requests_in_flight(tmp_path, tokenizer_dir, workers):
    """The target's metrics are judged (waits, recoveries) against loadrepro's requests in flight to the target,
    not to every replica: two replicas at concurrency 4, round robin, each runs about 2 while 4 are in flight in
    all; read against 4, requests the target kept running for nobody could never show. Sent from one process
    or two (their counts shared with the driver)."""
    a = StubServer(tokens=8, token_delay_s=0.05, kv_leak_per_request=0.0)  # /metrics: its own running count
    b = StubServer(tokens=8, token_delay_s=0.05)
    path = tmp_path / "replicas.toml"
    path.write_text(PROFILE.format(routing="round_robin", conversations=24, turns=1).replace(
        'metrics_path = ""', 'metrics_path = "/metrics"\nmetrics_interval_s = 0.1'))
    with a.running(), b.running():
        report = loadrepro.run(path, base_url=[a.url, b.url], tokenizer=tokenizer_dir, out=tmp_path / "run",
                               workers=workers)
    assert report.passed, report.reasons
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    pairs = [(s["in_flight"], s["values"]["running"]) for s in samples
             if s.get("in_flight") is not None and s.get("values", {}).get("running")]
    assert len(pairs) >= 5, pairs
    seen, ran = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    print(f"workers {workers}: in flight to the target {seen} vs its running {ran} over {len(pairs)} scrapes")
    assert 0.7 * ran <= seen <= 1.3 * ran, pairs  # all four in flight against it would be twice what it runs


def test_a_replica_at_a_url_whose_process_exits_near_the_runs_end_is_named(tmp_path, tokenizer_dir):
    """A replica given by URL (its process not loadrepro's to watch) crashes after five answers, and the run ends
    soon after, before its /health was polled twice more: the requests that could not reach it after its last
    answer, with its /health not 200 since (or not polled again), name it all the same."""
    from loadrepro.load.engine import ManagedEngine

    crashing = ManagedEngine(f"{sys.executable} -m tests.restart_server --port {{port}} --state "
                             f"{tmp_path / 'starts'} --crash-start 1 --crash-after 5 --tokens 4 --delay 0.01",
                             tmp_path / "replica.log")
    b = crashing.start(30)
    try:
        with StubServer(tokens=8, token_delay_s=0.02).running() as a:
            path = tmp_path / "replicas.toml"
            path.write_text(PROFILE.format(routing="round_robin", conversations=24, turns=1))
            report = loadrepro.run(path, base_url=[a.url, b], tokenizer=tokenizer_dir, out=tmp_path / "run",
                                   overrides=["watch.health_interval_s=1.0"])  # the default: few polls after it
    finally:
        crashing.stop()
    first, second = report.endpoints
    assert second.by_outcome.get("unreachable", 0) >= 2 and second.by_outcome.get("ok") == 5, second
    assert second.died_at_s is not None and first.died_at_s is None, report.endpoints
    found = rule(report, "replica_death")
    assert found.fired and found.detail.startswith(f"replica-1 ({b}) died at "), found.detail
    assert not report.passed


def after_their_turn_before(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The later turns sent to the replica their conversation's turn before went to, and the others."""
    where = {(r["conversation"], r["turn"]): r["replica"] for r in rows}
    later = [r for r in rows if r["turn"] > 1]
    same = [r for r in later if where[(r["conversation"], r["turn"] - 1)] == r["replica"]]
    return same, [r for r in later if r not in same]


@pytest.mark.parametrize(("conversations", "mostly"), [(12, "same"), (11, "elsewhere")])
def test_round_robin_holds_a_later_turn_to_the_cache_only_where_its_turn_before_went(tmp_path, tokenizer_dir,
                                                                                     conversations, mostly):
    # Request ids go to the two replicas in turn and a conversation's turns are about `conversations` ids apart: an
    # even count sends most later turns where their turn before went, an odd count most elsewhere (busy: 16-24 of
    # the 22-24 measured; the test needs one).
    a, b = StubServer(tokens=8), StubServer(tokens=8)  # each reports half of every prompt cached: short of 0.9
    path = tmp_path / "replicas.toml"
    path.write_text(PROFILE.format(routing="round_robin", conversations=conversations, turns=3)
                    + "[verdict]\nmin_cache_hit = 0.9\n")
    with a.running(), b.running():
        report = loadrepro.run(path, base_url=[a.url, b.url], tokenizer=tokenizer_dir, out=tmp_path / "run")
    same, elsewhere = after_their_turn_before(records(tmp_path))
    assert same if mostly == "same" else elsewhere, (len(same), len(elsewhere))
    found = rule(report, "prefix_reuse_missing")
    assert found.fired == bool(same), found.detail
    assert not same or found.detail.startswith(f"{len(same)}/{len(same)} later turns"), found.detail
    assert all(r["shared_prefix_tokens"] > 0 for r in same)
    assert all(r["shared_prefix_tokens"] == 0 for r in elsewhere)  # their replica never had their prefix


def test_round_robin_over_replicas_that_cache_what_they_were_sent_passes_min_cache_hit(tmp_path):
    # The healthy profile asks min_cache_hit 0.9 of two simulated engines, each with a prefix cache of its own; an
    # odd count of conversations sends most later turns to the other replica (see above).
    report = loadrepro.run("healthy", replicas=2, overrides=["workload.conversations=11"], out=tmp_path / "run")
    assert report.passed, report.reasons
    _, elsewhere = after_their_turn_before(records(tmp_path))
    assert elsewhere and not rule(report, "prefix_reuse_missing").fired
    reuse = report.workload.prefix_reuse  # of what could have been found cached where each went, what was
    assert reuse is not None and reuse.cached_tokens is not None and reuse.cached_tokens <= reuse.possible_tokens


def test_a_soaks_next_pass_of_a_conversation_is_held_to_where_its_own_turns_went():
    """A soak sends each conversation again once it ended: its turn 1 starts the count anew."""
    turns = RoutedTurns(spread=True)

    def expected(id: int, turn: int, replica: int) -> int:
        sent = dataclasses.replace(record(id, turn=turn, shared=0 if turn == 1 else 500), replica=replica)
        return turns.expected(sent).shared_prefix_tokens

    first_pass = [expected(1, 1, 0), expected(2, 2, 0), expected(3, 3, 1)]
    next_pass = [expected(4, 1, 1), expected(5, 2, 1), expected(6, 3, 0)]
    assert first_pass == next_pass == [0, 500, 0]
    assert RoutedTurns(spread=False).expected(record(7, turn=2, shared=500)).shared_prefix_tokens == 500
