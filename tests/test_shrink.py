"""`loadrepro shrink`: the search against arithmetic predicates (exact answers known), and one real shrink of the
simulated page-index failure, whose smallest failing request the KV arithmetic gives."""

import asyncio
import json
import tomllib

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.shrink.attempts import engine_of
from loadrepro.shrink.search import Shrinker, Trial
from tests.helpers import cli
from tests.interrupting import interrupted_when
from tests.stub_server import StubServer

BASE = load_profile("quickstart", ["workload.conversations=8", "workload.turns=3", "workload.prefix_tokens=4000",
                                   "workload.turn_tokens=300", "workload.max_tokens=200", "load.concurrency=8"])


def fake(predicate):
    """A trial that fails when `predicate(profile, longest request)` holds; requests as the workload plans them."""
    seen = []

    async def trial(profile) -> Trial:
        w = profile.workload
        lengths = tuple((c, t, w.prefix_tokens + (t - 1) * w.turn_tokens, w.max_tokens)
                        for c in range(w.conversations) for t in range(1, w.turns + 1))
        longest = max(p + m for _, _, p, m in lengths)
        seen.append(profile)
        return Trial(predicate(profile, longest), len(lengths), sum(p for _, _, p, _ in lengths), 0.0, "", None,
                     lengths)

    return trial, seen


def test_each_knob_reaches_its_boundary():
    # Fails when 3 or more requests may run at once, each needing 2,500 tokens or more.
    trial, _ = fake(lambda p, longest: p.load.concurrency >= 3 and p.workload.conversations >= 3 and longest >= 2500)
    shrunk = asyncio.run(Shrinker(trial, 500, 60).shrink(BASE))
    w = shrunk.profile.workload
    assert (w.conversations, w.turns, shrunk.profile.load.concurrency) == (3, 1, 3)
    assert w.prefix_tokens + w.max_tokens == 2500  # exactly at the edge, whichever knob got there
    assert shrunk.best.failed and shrunk.stopped == "no pass made progress"
    assert shrunk.steps[1].change.startswith("turns 3 -> 1, prefix_tokens 4000 -> 4600")  # folded to the longest


def test_a_failure_that_needs_turns_keeps_them():
    trial, _ = fake(lambda p, longest: p.workload.turns >= 2 and p.workload.prefix_tokens >= 1000)
    shrunk = asyncio.run(Shrinker(trial, 500, 60).shrink(BASE))
    w = shrunk.profile.workload
    assert (w.turns, w.prefix_tokens, w.conversations, w.turn_tokens, w.max_tokens) == (2, 1000, 1, 1, 1)


def test_the_budgets_stop_the_search_and_a_passing_workload_is_said_so():
    trial, seen = fake(lambda p, longest: longest >= 100)
    shrunk = asyncio.run(Shrinker(trial, 5, 60).shrink(BASE))
    assert shrunk.trials == 5 == len(seen) and shrunk.stopped == "the trial budget (5) was spent"
    ticks = iter(range(0, 1000, 10))
    timed = asyncio.run(Shrinker(trial, 500, 25, clock=lambda: next(ticks)).shrink(BASE))
    assert timed.stopped == "the time budget (25 s) was spent" and timed.trials == 3  # each clock read is 10 s
    never, _ = fake(lambda p, longest: False)
    assert asyncio.run(Shrinker(never, 500, 60).shrink(BASE)).stopped == \
        "the original workload did not fail the same way"


def test_a_signal_ends_the_search_with_the_smallest_failing_workload_found_before_it():
    """KeyboardInterrupt in the fourth trial (its run cut short, or its engine starting): the search stops, the
    best so far is the result and the cut trial is not counted; in the first trial there is no result to keep."""
    failing, _ = fake(lambda p, longest: longest >= 100)
    calls = 0

    async def cut_at(n: int, profile) -> Trial:
        nonlocal calls
        calls += 1
        if calls == n:
            raise KeyboardInterrupt
        return await failing(profile)

    shrunk = asyncio.run(Shrinker(lambda p: cut_at(4, p), 500, 60).shrink(BASE))
    assert shrunk.interrupted and shrunk.stopped == "interrupted" and shrunk.trials == 3, shrunk.stopped
    assert shrunk.best.failed and len(shrunk.steps) == 3 and shrunk.best is shrunk.steps[-1].trial
    assert shrunk.profile.workload.turns == 1  # the second trial (turns folded) failed and was kept
    calls = 0
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(Shrinker(lambda p: cut_at(1, p), 500, 60).shrink(BASE))
    calls = 0
    uninterrupted = asyncio.run(Shrinker(lambda p: cut_at(0, p), 500, 60).shrink(BASE))
    assert not uninterrupted.interrupted and uninterrupted.stopped == "no pass made progress"


@pytest.mark.slow
def test_ctrl_c_during_a_shrink_writes_the_smallest_failing_workload_found_and_exits_130(tmp_path):
    """SIGINT once the third trial has begun: profile.toml, run/, bundle.zip and shrink.md are those of the best
    failing candidate before it (shrink.md says the search was interrupted), no trial folder is left, and the exit
    is 130."""
    out = tmp_path / "shrink"
    code, output = interrupted_when(["shrink", "--profile", "page-index", "--out", str(out), "--max-trials", "40",
                                     "--time-budget", "300"], (out / "trials" / "trial-003").exists)
    assert code == 130, output
    assert "(interrupted)" in output and "still failing with fatal signature" in output, output
    assert "stopped: interrupted" in (out / "shrink.md").read_text()
    report = json.loads((out / "run" / "report.json").read_text())
    assert report["verdict"] == "fail" and report["signatures"][0]["name"] == "trtllm-page-indices-too-short"
    assert tomllib.loads((out / "profile.toml").read_text())["workload"]
    assert (out / "bundle.zip").stat().st_size > 0 and not (out / "trials").exists()


@pytest.mark.slow
def test_page_index_shrinks_to_one_request_at_the_length_the_arithmetic_gives(tmp_path, pictures):
    """The index table is sized from 4 MiB / 2,048 B per token = 2,048 tokens: ceil(2049 / 32) = 65 blocks,
    rounded up to 68 entries (/sim/config says page_index_entries 68), which span 68 x 32 = 2,176 tokens. The
    smallest request that must fail needs 69 blocks: prompt + max_tokens = 2,177."""
    out = tmp_path / "shrink"
    done = cli("shrink", "--profile", "page-index", "--out", str(out),
                           "--max-trials", "40", "--time-budget", "300")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "still failing with fatal signature trtllm-page-indices-too-short" in done.stdout
    minimal = tomllib.loads((out / "profile.toml").read_text())["workload"]
    assert (minimal["conversations"], minimal["turns"]) == (1, 1)
    report = json.loads((out / "run" / "report.json").read_text())
    assert report["verdict"] == "fail" and report["signatures"][0]["name"] == "trtllm-page-indices-too-short"
    assert report["requests"]["total"] == 1
    shrink_md = (out / "shrink.md").read_text()
    row = next(line for line in shrink_md.splitlines() if line.startswith("| 0 | 1 | "))
    needed = int(row.strip(" |").split(" | ")[-1].replace(",", ""))  # prompt + max_tokens
    assert 2177 <= needed <= 2177 * 1.1, needed
    assert "page-index table 68 entries" in shrink_md and (out / "bundle.zip").stat().st_size > 0
    assert (out / "run" / "report.html").exists() and not (out / "trials").exists()
    patched = cli("run", "--profile", str(out / "profile.toml"),
                              "--set", "sim.policy='patched'", "--out", str(tmp_path / "patched"), "--quiet")
    assert patched.returncode == 0, patched.stdout + patched.stderr


def test_a_run_against_a_live_url_cannot_be_shrunk_and_says_why(tmp_path):
    with StubServer("fatal_400").running() as server:
        cli("run", "--base-url", server.url, "--out", str(tmp_path),
                        "--quiet", "--set", "workload.prefix_tokens=200", "--set", "workload.conversations=2")
    done = cli("shrink", str(tmp_path))
    assert done.returncode == 2 and "a live engine cannot be shrunk" in done.stderr and "--engine-cmd" in done.stderr
    given = engine_of(tmp_path, "my-engine --port {port}")  # the engine the hint asks for is taken
    assert given[1] == "my-engine --port {port}" and given[0].workload.prefix_tokens == 200
    neither = cli("shrink")
    assert neither.returncode == 2 and "give a failing run directory or a profile" in neither.stderr


def test_a_trace_shrinks_by_sessions_requests_lengths_and_concurrency():
    """A trace of 12 two-turn sessions that fails when 5 sessions' follow-ups run at once at 40% of their lengths
    or more: the shrinker drops sessions, then the latest requests, shortens lengths, lowers concurrency."""
    base = load_profile("trace-draft-pool")

    async def trial(profile) -> Trial:
        w = profile.workload
        sessions = w.trace_max_sessions or 12
        pairs = [(c, t) for t in (1, 2) for c in range(sessions)][:w.trace_max_requests or None]
        lengths = tuple((c, t, 4000 * w.trace_length_percent // 100, 1) for c, t in pairs)
        followups = sum(t == 2 for _, t in pairs)
        failed = min(followups, profile.load.concurrency) >= 5 and w.trace_length_percent >= 40
        return Trial(failed, len(lengths), sum(p for _, _, p, _ in lengths), 0.0, "", None, lengths)

    shrunk = asyncio.run(Shrinker(trial, 500, 60).shrink(base))
    w = shrunk.profile.workload
    assert (w.trace_max_sessions, w.trace_length_percent) == (5, 40)
    assert w.trace_max_requests in (0, 10)  # every request of the 5 sessions is needed
    assert shrunk.profile.load.concurrency == 5 and shrunk.best.requests == 10
    assert not any("conversations" in s.change or "prefix_tokens" in s.change for s in shrunk.steps)


def test_a_trace_and_agents_are_shrunk_and_listed_by_the_trace_knobs():
    """shrink.md lists the knobs the search turned: a trace's and agents' are its window and lengths, not the
    conversation knobs they do not have."""
    from loadrepro.shrink.search import KNOBS, TRACE_KNOBS, knobs_for

    assert knobs_for(load_profile("quickstart")) is KNOBS
    assert knobs_for(load_profile("trace-draft-pool")) is knobs_for(load_profile("agents-draft-pool")) is TRACE_KNOBS


def test_a_trial_that_never_ends_is_cut_at_the_budget_and_ends_the_search():
    """The fourth trial never returns (an engine that never listens): the search ends when the budget does, with
    the best failing workload before it, the cut trial listed, and why it stopped said."""
    failing, _ = fake(lambda p, longest: longest >= 100)
    calls = 0

    async def hangs_at_4(profile) -> Trial:
        nonlocal calls
        calls += 1
        if calls == 4:
            await asyncio.Event().wait()
        return await failing(profile)

    said: list[str] = []
    shrunk = asyncio.run(asyncio.wait_for(Shrinker(hangs_at_4, 500, 0.5, said.append).shrink(BASE), 30))
    assert shrunk.cut and not shrunk.interrupted and shrunk.trials == 4 == calls
    assert shrunk.stopped.startswith("the time budget (0.5 s) ran out during a trial (trial 4: "), shrunk.stopped
    assert shrunk.best.failed and shrunk.best is shrunk.steps[2].trial
    assert shrunk.steps[-1].trial.result == "cut short by the time budget"
    assert said[-1].startswith("trial 4: ") and "cut short by the time budget" in said[-1]
    assert said[-1].endswith("of 0.5 s spent)")


def test_each_trial_is_said_as_it_starts_and_as_it_ends_as_shrink_md_says_it():
    """What a trial tried, then its outcome in shrink.md's words (a workload that cannot be planned is not said
    to pass), with the time spent of the budget."""
    async def trial(profile) -> Trial:
        if profile.workload.conversations == 1:
            return Trial(False, 0, 0, 0.0, "cannot be planned: too small")
        return Trial(profile.workload.conversations >= 2, 2, 100, 0.0, "passed", None, ((0, 1, 50, 1),))

    said: list[str] = []
    asyncio.run(Shrinker(trial, 3, 60, said.append).shrink(BASE))
    assert said[0] == "trial 1: the original workload (0 s of 60 s spent)", said
    assert said[1].startswith("trial 1: the original workload: fails (2 requests")
    assert said[2] == "trial 2: workload.conversations 8 -> 1 (0 s of 60 s spent)", said
    assert said[3].startswith("trial 2: workload.conversations 8 -> 1: cannot be planned: too small (0 requests"), said
    assert all(line.endswith("s of 60 s spent)") for line in said), said


def test_a_port_filled_in_is_put_back_as_the_template():
    from loadrepro.load.engine import as_template

    assert as_template("srv -c 45041 --port 45041", "http://127.0.0.1:45041") == "srv -c {port} --port {port}"
    assert as_template("srv -c 145041 --port=45041x", "http://127.0.0.1:45041") == "srv -c 145041 --port={port}x"
    assert as_template("srv --port {port}", "http://127.0.0.1:45041") == "srv --port {port}"
    assert as_template("srv --port 8000", "http://127.0.0.1:45041") is None


@pytest.mark.slow
def test_a_run_that_started_its_engine_is_shrunk_on_fresh_ports(tmp_path):
    """A run whose engine command had {port}: run.json keeps the command as given, and every trial's engine
    listens on the port that trial chose (the trials reach it and fail as the run did). A run directory written
    before the template was kept has its port put back as {port}."""
    import os
    import sys
    import time

    from tests.helpers import spawn

    command = f"{sys.executable} -m loadrepro sim --scenario page-index --port {{port}}"
    run = tmp_path / "run"
    done = cli("run", "--profile", "page-index", "--engine-cmd", command, "--out", str(run), "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr
    facts = json.loads((run / "run.json").read_text())
    port = facts["base_url"].rsplit(":", 1)[1]
    assert facts["engine_cmd_template"] == command and facts["engine_cmd"] == command.replace("{port}", port)
    assert engine_of(run)[1] == command
    began = time.monotonic()
    shrunk = spawn("shrink", str(run), "--out", str(tmp_path / "shrink"), "--max-trials", "2", "--time-budget", "120",
                   timeout=150)
    assert shrunk.returncode == 0, shrunk.stdout + shrunk.stderr
    assert time.monotonic() - began < 130
    assert "trial 1: the original workload: fails" in shrunk.stderr + shrunk.stdout
    minimal = json.loads((tmp_path / "shrink" / "run" / "report.json").read_text())
    assert minimal["requests"]["total"] >= 1 and minimal["signatures"][0]["name"] == "trtllm-page-indices-too-short"
    assert minimal["target"]["base_url"] != facts["base_url"]
    del facts["engine_cmd_template"]  # as a run directory written before it was kept
    (run / "run.json").write_text(json.dumps(facts))
    assert engine_of(run)[1] == command and os.path.exists(run / "report.json")


@pytest.mark.slow
def test_an_engine_that_never_listens_ends_the_shrink_within_its_budget_and_says_why(tmp_path):
    """A trial's engine that never answers /health: with the time budget shorter than the engine's start timeout,
    the shrink ends when its budget does (shrink.md says the budget ran out); with a shorter start timeout, it
    ends then, the engine's log's last lines in the error and shrink.md, the trial's log kept."""
    import sys
    import time

    import loadrepro
    from loadrepro.errors import TargetError, UsageError

    never = f"{sys.executable} -c \"import time; print('loading model', flush=True); time.sleep(600)\" {{port}}"
    began = time.monotonic()
    with pytest.raises(UsageError, match=r"the time budget \(2 s\) ran out during a trial \(trial 1: "):
        loadrepro.shrink_failure(profile="quickstart", engine_cmd=never, time_budget_s=2, out=tmp_path / "budget")
    assert time.monotonic() - began < 2 + 20  # its start timeout is 600 s
    assert "No minimal workload: the time budget (2 s) ran out" in (tmp_path / "budget" / "shrink.md").read_text()
    with pytest.raises(TargetError) as raised:
        loadrepro.shrink_failure(profile="quickstart", engine_cmd=never, engine_start_timeout_s=1,
                                 out=tmp_path / "start")
    assert "the engine was not healthy within 1 s" in str(raised.value) and "loading model" in str(raised.value)
    written = (tmp_path / "start" / "shrink.md").read_text()
    assert "## Why it stopped" in written and "loading model" in written
    assert "loading model" in (tmp_path / "start" / "trials" / "trial-001" / "engine.log").read_text()


def test_a_run_of_the_simulated_engine_is_shrunk_on_the_simulated_engine_its_profile_describes(tmp_path):
    """run.json keeps the simulated engine's command as a template too; a shrink starts the profile's own."""
    from tests.helpers import small

    done = cli("run", "--profile", "quickstart", *small(), "--out", str(tmp_path), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    facts = json.loads((tmp_path / "run.json").read_text())
    assert facts["engine_cmd_template"].endswith("--host {host} --port {port}")
    assert facts["engine_cmd"].endswith(f"--port {facts['base_url'].rsplit(':', 1)[1]}")
    assert engine_of(tmp_path)[1] is None


@pytest.mark.slow
def test_ctrl_c_while_the_first_trials_engine_starts_ends_the_shrink_and_says_so(tmp_path):
    """SIGINT while the first trial's engine has not come up: the engine is stopped, shrink.md says nothing was
    found yet, no trial folder is left, and the exit is 130."""
    import sys

    from tests.test_engine import processes_with

    marker = f"never-listens-{tmp_path.name}"
    never = f"{sys.executable} -c \"import time; time.sleep(600)\" {marker} {{port}}"
    out = tmp_path / "shrink"
    code, output = interrupted_when(["shrink", "--profile", "quickstart", "--engine-cmd", never, "--out", str(out)],
                                    (out / "trials" / "trial-001" / "engine.log").exists)
    assert code == 130, output
    assert "interrupted during the first trial" in (out / "shrink.md").read_text()
    assert not (out / "trials").exists() and not processes_with(marker)


def test_the_minimal_profile_describes_itself_not_the_workload_it_started_from(tmp_path):
    """After a shrink, the minimal profile.toml, its run's report and the bundle's "What was run" say what the
    minimal workload is, from its own keys: the original's description tells of a workload many times its size."""
    import sys
    import zipfile

    engine = f"{sys.executable} -m tests.kv_pool_server --host 127.0.0.1 --port {{port}} --pool 2200"
    out = tmp_path / "shrink"
    done = cli("shrink", "--profile", "healthy", "--engine-cmd", engine, "--out", str(out), "--max-trials", "2",
               "--time-budget", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    original = load_profile("healthy").description
    assert original
    profile = tomllib.loads((out / "profile.toml").read_text())
    w = profile["workload"]
    described = profile["description"]
    assert described != original and described.startswith("Shrunk by loadrepro shrink from profile healthy: ")
    assert (f"conversations {w['conversations']}, turns {w['turns']}" in described
            and f"prefix_tokens {w['prefix_tokens']}" in described and f"max_tokens {w['max_tokens']}" in described
            and f"load.concurrency {profile['load']['concurrency']}" in described)
    report = json.loads((out / "run" / "report.json").read_text())
    assert report["profile"]["description"] == described
    assert f"{report['requests']['total']:,} requests" in described
    assert tomllib.loads((out / "run" / "profile.toml").read_text())["description"] == described
    with zipfile.ZipFile(out / "bundle.zip") as bundle:
        readme = bundle.read(next(n for n in bundle.namelist() if n.endswith("/README.md"))).decode()
    assert f"profile `healthy` ({described})" in readme and original not in readme
