"""`compare BASELINE RUN --gate`: closed (exit 1) when RUN is significantly worse on a gated figure by more than
the tolerance, or a rule fails in RUN only; open (exit 0) for the same engine twice and for a near-tie."""

from __future__ import annotations

import contextlib
import multiprocessing
import shutil

import pytest

import loadrepro
from loadrepro.compare.gate import gate
from loadrepro.errors import UsageError
from loadrepro.report.json import read_report
from loadrepro.runs.repeats import gate_runs
from loadrepro.schema.long_run_sections import SloInfo, SloMissed
from loadrepro.schema.report_kinds import Severity
from loadrepro.schema.report_sections import RuleResult
from tests.helpers import cli
from tests.stub_server import StubServer

PROFILE = """
name = "gate"
api = "chat"
[workload]
seed = 9
conversations = 60
turns = 1
prefix_tokens = 300
max_tokens = 8
[load]
concurrency = 12
request_timeout_s = 20
stall_timeout_s = 10
[watch]
metrics_path = ""
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer_dir):
    """The same workload on a server whose first token comes after 1 s, twice; after 1.01 s (1% slower); and after
    1.3 s (30% slower). One token an answer: nothing but the first token differs, so nothing else is gated. The four
    run at once, each against its own server: a busy machine slows them alike, where runs one after another each
    met the load of its moment (the same engine's p95 once read 13% slower). Each runs in its own process, forked
    from one that has loadrepro imported already so that the four start together: on one event loop, the run that
    ended first wrote its reports while the others still loaded, and their slowest first tokens waited on it. A
    second, not a tenth of one: on this suite's busy machine a run's slowest first tokens still came up to 25 ms late
    (the near tie's p95 once read 118.5 -> 142.0 ms), which is 20% of 120 ms and 2.5% of a second, so the gate's 5%
    is what is tested, not the machine's load."""
    base = tmp_path_factory.mktemp("gate")
    path = base / "gate.toml"
    path.write_text(PROFILE)
    delays = {"baseline": 1.0, "again": 1.0, "near": 1.01, "slow": 1.3}
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["loadrepro.api"])
    with contextlib.ExitStack() as servers, context.Pool(len(delays)) as pool:
        urls = {name: servers.enter_context(StubServer(tokens=1, first_token_delay_s=ttft_s).running()).url
                for name, ttft_s in delays.items()}
        pending = [pool.apply_async(loadrepro.run, (path,), {
            "base_url": urls[name], "tokenizer": str(tokenizer_dir), "out": base / name, "label": name})
            for name in delays]
        reports = [done.get(timeout=100) for done in pending]
    for report in reports:
        assert report.passed, report.reasons
    return {name: base / name for name in delays}


@pytest.mark.slow
def test_the_same_engine_twice_and_a_near_tie_leave_the_gate_open(runs):
    baseline = read_report(runs["baseline"])
    for name in ("again", "near"):
        result = gate_runs(baseline, read_report(runs[name]), tolerance=0.05)
        assert result.passed, (name, result.detail, result.checks)


@pytest.mark.slow
def test_a_run_thirty_percent_slower_closes_it_naming_ttft_given_a_history(runs, tmp_path):
    """One run a side cannot tell a change from the noise between runs: open, and said. Given earlier runs of the
    engine (--history), their spread is that noise, and 30% slower closes it."""
    alone = cli("compare", str(runs["baseline"]), str(runs["slow"]), "--gate")
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert "open, undecided: TTFT p50" in alone.stdout and "cannot tell" in alone.stdout
    history = tmp_path / "history"
    for name in ("baseline", "again", "near"):
        shutil.copytree(runs[name], history / name)
    done = cli("compare", str(runs["baseline"]), str(runs["slow"]),
                           "--gate", "--history", str(history), "--out", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "loadrepro gate: CLOSED" in done.stdout
    assert f"| baseline: {runs['baseline']} (baseline) | run: {runs['slow']} (slow) |" in done.stdout
    closed = [c for c in read_gate(tmp_path).checks if c.closed]
    assert closed and all(c.figure.startswith("TTFT") for c in closed), closed
    assert "closed by TTFT p50" in done.stdout
    again = cli("compare", str(runs["baseline"]), str(runs["again"]),
                            "--gate", "--history", str(history))
    assert again.returncode == 0, again.stdout + again.stderr


def read_gate(path):
    from loadrepro.compare.gate import Gate

    return Gate.model_validate_json((path / "gate.json").read_text())


def test_a_rule_failing_in_the_run_only_closes_it(runs):
    baseline = read_report(runs["baseline"])
    broken = RuleResult(name="stalled_streams", fired=True, severity=Severity.FAIL, detail="3 streams stalled")
    run = baseline.model_copy(update={"rules": [*baseline.rules, broken]})
    result = gate(baseline, run)
    assert not result.passed and "rule stalled_streams" in result.detail
    assert gate(run, run).passed  # failing in both: not tonight's regression


def _slo(met: int, requests: int) -> SloInfo:
    return SloInfo(limits_ms={"ttft": 500.0}, attainment=met / requests, requests=requests, met=met, from_s=0,
                   steady_state=True, in_flight_level=4.0, goodput_requests_per_s=1.0, goodput_tokens_per_s=8.0,
                   missed=SloMissed(ttft=requests - met, itl=0, e2e=0, failed=0), whole_run_attainment=None,
                   client_queue_p95_ms=None)


def test_the_slo_attainment_closes_it_when_significantly_lower(runs):
    baseline = read_report(runs["baseline"]).model_copy(update={"slo": _slo(990, 1000)})
    worse = baseline.model_copy(update={"slo": _slo(900, 1000)})  # 99% -> 90%: far beyond chance and 5%
    tie = baseline.model_copy(update={"slo": _slo(985, 1000)})  # 99% -> 98.5%: within the tolerance
    assert not gate(baseline, worse).passed
    assert gate(baseline, tie).passed


def test_runs_of_different_workloads_are_refused(runs):
    baseline = read_report(runs["baseline"])
    with pytest.raises(UsageError, match="two runs of one workload"):
        gate_runs(baseline, baseline.model_copy(update={"seed": 10}), 0.05)


def test_compare_lists_each_sides_slo_when_both_judged_one(runs):
    from loadrepro.compare.comparison import compare
    from loadrepro.config.profile import VerdictSpec

    baseline = read_report(runs["baseline"])
    a, b = (baseline.model_copy(update={"slo": _slo(met, 1000)}) for met in (990, 900))
    rows = {row.test: row for row in compare(a, b, VerdictSpec()).rows}
    assert rows["SLO attainment"].stock == "99.0% (990 of 1,000)" and rows["SLO attainment"].patched.startswith("90.0%")
    assert "SLO attainment" not in {row.test for row in compare(baseline, baseline, VerdictSpec()).rows}


def test_a_history_reads_every_earlier_run_of_the_workload_and_nothing_else(runs, tmp_path):
    """Runs of the workload anywhere below it count, one each; the run gated, a run of another workload and a
    report that does not read do not."""
    from loadrepro.runs.repeats import history_runs

    history = tmp_path / "history"
    for name in ("baseline", "again", "near"):
        shutil.copytree(runs[name], history / "nights" / name)
    shutil.copytree(runs["slow"], history / "tonight")
    other = history / "other"
    shutil.copytree(runs["baseline"], other)
    text = (other / "report.json").read_text()
    (other / "report.json").write_text(text.replace('"seed": 9,', '"seed": 10,'))
    (history / "torn").mkdir()
    (history / "torn" / "report.json").write_text('{"verdict": ')
    baseline = read_report(runs["baseline"])
    assert read_report(other).seed == 10
    found = history_runs(history, baseline, (history / "tonight",))
    assert len(found) == 3
    assert len(history_runs(history, baseline)) == 4


def test_a_history_is_read_in_the_order_its_runs_started_and_names_each_by_its_directory(runs, tmp_path):
    """A change point is found in time order: a night's directory name does not order it, its start does."""
    from loadrepro.runs.repeats import history_runs

    history = tmp_path / "history"
    starts = {"b-first": "2026-01-01T00:00:00+00:00", "a-second": "2026-01-02T00:00:00+00:00"}
    for name, started in starts.items():
        shutil.copytree(runs["baseline"], history / name)
        report = read_report(history / name).model_copy(update={"started_at": started})
        (history / name / "report.json").write_text(report.model_dump_json())
    found = history_runs(history, read_report(runs["baseline"]))
    assert [name for name, _ in found] == ["b-first", "a-second"]
