"""Repeated trials: failure rates with exact intervals, A/B verdicts with a one-sided Fisher exact test, early
stopping once decided, and the simulated engine's seeded race as the flaky twin (patched never fails)."""

from __future__ import annotations

import json

import pytest
from scipy import stats
from typer.testing import CliRunner

import loadrepro
from loadrepro.cli import commands as cli
from loadrepro.compare.comparison import Conclusion
from loadrepro.compare.trials import Trial, decided, p_value, rate_of, trials_needed
from loadrepro.errors import UsageError
from loadrepro.sim.config import sim_config
from loadrepro.sim.scheduler import RACE_AT, race_point
from tests.interrupting import interrupted_when


def trials(outcomes: str) -> list[Trial]:
    """'FPP': trial 1 failed, trials 2 and 3 passed."""
    return [Trial(i + 1, i, c == "P", () if c == "P" else ("engine_death",), None if c == "P" else 1.0, "")
            for i, c in enumerate(outcomes)]


def test_a_failure_rate_has_its_exact_interval():
    rate = rate_of(trials("FFFPPPPPPP"))
    assert (rate.failed, rate.n) == (3, 10)
    # Clopper-Pearson from the beta distribution's quantiles, independently of binomtest
    assert rate.ci95[0] == pytest.approx(stats.beta.ppf(0.025, 3, 8))
    assert rate.ci95[1] == pytest.approx(stats.beta.ppf(0.975, 4, 7))
    assert str(rate) == "3/10 (30%; 95% CI 7%-65%)"
    assert rate_of(trials("PPPPP")).ci95[0] == 0.0


def test_fishers_one_sided_p_and_the_trials_it_would_take():
    assert p_value(rate_of(trials("FFFFF")), rate_of(trials("PPPPP"))) == pytest.approx(1 / 252)  # 1 / C(10, 5)
    assert p_value(rate_of(trials("FPPPP")), rate_of(trials("PPPPP"))) == pytest.approx(0.5)
    needed = trials_needed(0.1, 0.05)
    assert needed == 46
    assert trials_needed(0.5, 0.05) == 7 and trials_needed(0.0, 0.05) is None


@pytest.mark.parametrize(("stock", "patched", "planned", "why"), [
    ("FFFF", "PPPP", 20, "shown"),  # 4/4 against 0/4: p = 1/70
    ("FFF", "PPP", 20, None),  # p = 0.05: not below it yet, and still within reach
    ("FFFFF", "PPPPF", 20, "patched failed"),
    ("PPP", "PPP", 5, "out of reach"),  # 2/5 against 0/5 at best
    ("FPP", "PPP", 5, "out of reach"),
    ("FP", "PP", 5, None),  # 4/5 against 0/5 is still possible
])
def test_trials_stop_once_the_answer_is_decided(stock, patched, planned, why):
    assert decided(trials(stock), trials(patched), planned, 0.05) == why


def test_the_race_strikes_on_its_share_of_starts_and_never_patched():
    stock = [race_point(sim_config("healthy", "stock", race_probability=0.3, race_seed=s)) for s in range(400)]
    struck = [at for at in stock if at is not None]
    assert 0.22 < len(struck) / 400 < 0.38 and all(RACE_AT[0] <= at <= RACE_AT[1] for at in struck)
    assert {race_point(sim_config("healthy", "patched", race_probability=1.0, race_seed=s)) for s in range(50)} \
        == {None}


def test_ab_with_trials_confirms_the_flaky_fix_and_stops_early(tmp_path):
    comparison = loadrepro.ab("flaky-race", trials=20, vary_seed=True, out=tmp_path)
    assert comparison.conclusion is Conclusion.FIX_CONFIRMED, comparison.detail
    assert comparison.p_value is not None and comparison.p_value < 0.05
    s, p = comparison.stock_trials, comparison.patched_trials
    assert p.failed == 0 and s.failed >= 4 and s.n == p.n < 20  # decided before all 20
    expected = [race_point(sim_config("healthy", "stock", race_probability=0.5, race_seed=7 + i)) is not None
                for i in range(s.n)]
    assert s.failed == sum(expected)  # each trial's seed decides its race
    assert "stopped after" in comparison.detail
    summary = json.loads((tmp_path / "stock" / "report.json").read_text())["trials"]
    assert summary["failed"] == s.failed and summary["signatures"]["engine_death"] == s.failed
    assert len(summary["first_failure_s"]) == s.failed and (tmp_path / "stock" / "trial-01" / "report.json").exists()
    # `compare` of the two sets of trials judges them the same way, from their directories
    again = CliRunner().invoke(cli.app, ["compare", str(tmp_path / "stock"), str(tmp_path / "patched"), "--out",
                                         str(tmp_path / "again")])
    assert again.exit_code == 0 and "fix confirmed" in again.output, again.output
    written = json.loads((tmp_path / "again" / "compare.json").read_text())
    assert written["p_value"] == pytest.approx(comparison.p_value) and written["stock_trials"]["failed"] == s.failed


def test_a_rare_flake_in_few_trials_is_not_shown_and_says_what_would_show_it(tmp_path):
    comparison = loadrepro.ab("flaky-race", trials=5, vary_seed=True, overrides=["sim.race_probability=0.1",
                                                                              "workload.seed=43"], out=tmp_path)
    assert comparison.conclusion is Conclusion.NOT_SHOWN, comparison.detail
    assert comparison.stock_trials.failed == 1 and comparison.stock_trials.n == 3  # out of reach after 3
    assert comparison.trials_needed == trials_needed(1 / 3, 0.05)
    assert f"{comparison.trials_needed} trials a side would show it" in comparison.detail


def test_run_with_trials_reports_the_failure_rate_and_fails_when_any_trial_failed(tmp_path):
    report = loadrepro.run("flaky-race", trials=4, vary_seed=True, out=tmp_path)
    failed = sum(race_point(sim_config("healthy", "stock", race_probability=0.5, race_seed=7 + i)) is not None
                 for i in range(4))
    assert report.trials is not None and (report.trials.n, report.trials.failed) == (4, failed)
    assert report.verdict == ("fail" if failed else "pass")
    assert report.reasons[0].startswith(f"failed {failed}/4")
    assert [t.seed for t in report.trials.trials] == [7, 8, 9, 10]
    assert json.loads((tmp_path / "report.json").read_text())["trials"]["n"] == 4


def test_trials_must_be_at_least_one():
    with pytest.raises(UsageError, match="trials: Input should be greater than or equal to 1"):
        loadrepro.run("flaky-race", trials=0)


def test_confirm_takes_n_or_k_of_n():
    from loadrepro.shrink.attempts import Confirm, parse_confirm

    assert parse_confirm("3") == (3, Confirm(1, 1))
    assert parse_confirm("3/5") == (0, Confirm(3, 5))
    for bad in ("5/3", "0/2", "x", "-1", "2/"):
        with pytest.raises(UsageError, match="--confirm"):
            parse_confirm(bad)
    rule = Confirm(3, 5)
    assert rule.decided(3, 3) and rule.decided(0, 3) and rule.decided(1, 4)  # 3 failed; out of reach twice
    assert not rule.decided(1, 2) and not rule.decided(2, 4)


def test_shrink_keeps_a_candidate_only_when_k_of_n_runs_fail(tmp_path):
    """The race at the 6th admission on every start (seed 1): 12 conversations fail every run (3/3); one
    conversation of 2 turns never reaches it (0/3, out of reach after three)."""
    result = loadrepro.shrink_failure(profile="flaky-race", overrides=["sim.race_probability=1.0", "sim.race_seed=1"],
                                      confirm="3/5", max_trials=3, out=tmp_path / "shrink")
    steps = result.shrunk.steps
    assert (steps[0].trial.failures, steps[0].trial.runs) == (3, 3)
    assert all((s.trial.failures, s.trial.runs) in ((3, 3), (0, 3)) for s in steps)
    assert any(s.trial.runs == 3 and s.trial.failures == 0 for s in steps)  # a passing candidate stops at 0/3
    text = (tmp_path / "shrink" / "shrink.md").read_text()
    assert "in at least 3 of up to 5 runs of each candidate (--confirm 3/5" in text and "| failed / runs |" in text
    assert (tmp_path / "shrink" / "run" / "report.json").exists()


def test_ab_trials_interrupted_summarise_and_compare_the_trials_completed_and_exit_130(tmp_path):
    """Ctrl-C during the third trial pair: the two pairs completed are summarised on each side and compared
    (compare.md says it was interrupted), the interrupted trial's own report is kept, and the exit is 130."""
    out = tmp_path / "ab"
    third = out / "stock" / "trial-03" / "requests.jsonl"
    code, output = interrupted_when(["ab", "--profile", "flaky-race", "--trials", "6", "--set",
                                     "sim.race_probability=0", "--out", str(out), "--quiet"],
                                    lambda: third.exists() and bool(third.read_text().strip()))  # under way
    assert code == 130, output
    compared = json.loads((out / "compare.json").read_text())
    assert compared["stock_trials"]["n"] == compared["patched_trials"]["n"] == 2, compared
    assert "(stopped after 2 of 6 trials a side: interrupted)" in compared["detail"], compared["detail"]
    for side in ("stock", "patched"):
        summary = json.loads((out / side / "report.json").read_text())["trials"]
        assert summary["n"] == 2 and summary["planned"] == 6, summary
    assert (out / "stock" / "trial-03" / "report.json").exists()  # the interrupted trial's own report


def test_run_trials_interrupted_between_trials_summarise_those_completed_and_exit_130(tmp_path, tokenizer_dir):
    """SIGINT while the third trial plans (the server holds its question for the model's name): no load of it ran,
    so the signal is not the runner's to take; the two trials completed are still summarised, and the exit is
    130."""
    from tests.sweep_server import OverloadServer
    from tests.test_sweep import PROFILE

    profile = tmp_path / "trials.toml"
    profile.write_text(PROFILE.format(ttft_ms=5000.0))
    server = OverloadServer(limit=None, think_s=0.05, hold_models_after=48)  # two trials of 24 requests
    out = tmp_path / "trials"
    with server.running():
        code, output = interrupted_when(["run", "--profile", str(profile), "--trials", "4", "--base-url", server.url,
                                         "--tokenizer", str(tokenizer_dir), "--out", str(out), "--quiet"],
                                        server.held.is_set)
    assert code == 130, output
    report = json.loads((out / "report.json").read_text())
    summary = report["trials"]
    assert summary["n"] == 2 and summary["planned"] == 4, summary
    assert "trials: interrupted after 2 of 4; those completed before it are summarised" in report["notes"]
    assert [t["index"] for t in summary["trials"]] == [1, 2]
