"""Latency between two sides with bootstrap intervals: a slower engine is "regressed", a faster one "improved",
the same engine twice "no significant change"; a change too small to matter is not called one, however sure."""

from __future__ import annotations

import numpy as np
import pytest

import loadrepro
from loadrepro.compare.comparison import TTFT_FLOOR_MS, latency_changes, within_noise
from loadrepro.schema.report_sections import RequestRow


def rows(scale: float, n: int = 200, seed: int = 0) -> list[RequestRow]:
    """Completed requests of 32 tokens: TTFT around 100 ms and 10 ms between tokens, each x `scale`."""
    rng = np.random.default_rng(seed)
    made = []
    for i in range(n):
        ttft = float(rng.gamma(20, 5)) * scale
        itl = float(rng.normal(10, 1)) * scale
        made.append(RequestRow(id=i, conversation=i, turn=1, outcome="ok", status=200, ttft_ms=ttft,
                               e2e_ms=ttft + 31 * itl, output_tokens=32, cached_tokens=None, shared_prefix_tokens=0))
    return made


def verdicts(a, b) -> dict[str, str]:
    return {c.metric.split(" (")[0]: c.verdict for c in latency_changes([a], [b])}


def test_a_slower_engine_regressed_and_a_faster_one_improved():
    slower = verdicts(rows(1.0), rows(1.2, seed=1))
    assert slower == {"TTFT p50": "regressed", "TTFT p95": "regressed", "ITL p50": "regressed",
                      "decode tokens/s p50": "regressed"}
    faster = verdicts(rows(1.0), rows(0.8, seed=1))
    assert set(faster.values()) == {"improved"}


def test_the_same_engine_twice_and_a_change_too_small_to_matter_are_no_significant_change():
    assert set(verdicts(rows(1.0), rows(1.0, seed=1)).values()) == {"no significant change"}
    assert set(verdicts(rows(1.0, n=3000), rows(1.02, n=3000, seed=1)).values()) == {"no significant change"}


def test_the_interval_brackets_the_difference_and_too_few_requests_say_so():
    [ttft, *_] = latency_changes([rows(1.0)], [rows(1.2, seed=1)])
    assert ttft.ci95[0] < ttft.difference < ttft.ci95[1] and ttft.ci95[0] > 0
    assert ttft.patched == pytest.approx(ttft.stock + ttft.difference, abs=1e-2)
    assert {c.verdict for c in latency_changes([rows(1.0, n=5)], [rows(1.0)])} == {"not enough requests"}


@pytest.mark.slow
def test_two_passing_runs_of_the_simulated_engine_one_slowed(tmp_path):
    """The same engine twice: no significant change; its steps and prefill 30% slower: regressed. Each side is two
    runs, taken in turns (a, slow, b, a, slow, b): a machine whose load drifts (another test's engine starting)
    slows the three sides alike instead of one of them, as `ab --trials` takes its sides in turns. Steps of 10 ms:
    at the default 4 ms, a busy machine's scheduling noise alone moved one engine's ITL by 5% between runs, the
    share a change must reach to be called one."""
    sizes = ["workload.conversations=20", "workload.turns=2", "load.concurrency=8", "sim.step_s=0.010"]
    slow = ["sim.step_s=0.013", "sim.prefill_tokens_per_s=300000"]
    rows: dict[str, list] = {"a": [], "b": [], "slow": []}  # each side's runs
    for block in (1, 2):
        for name, extra in (("a", []), ("slow", slow), ("b", [])):
            report = loadrepro.run("healthy", overrides=sizes + extra, out=tmp_path / f"{name}{block}")
            assert report.passed, report.reasons
            rows[name].append(report.request_table)
    same = {c.metric: c for c in latency_changes(rows["a"], rows["b"])}
    slowed = {c.metric: c for c in latency_changes(rows["a"], rows["slow"])}
    itl = "ITL p50 (ms, each request's mean)"
    assert same[itl].verdict == "no significant change" and slowed[itl].verdict == "regressed", \
        "\n".join(map(str, [*same.values(), *slowed.values()]))
    assert slowed["decode tokens/s p50 (each request's)"].verdict == "regressed"
    # 30% slower steps
    assert 0.15 < slowed[itl].difference / slowed[itl].stock < 0.5


def _side(tokens: list[int], verdict: str, died: bool = False):
    """A report whose requests all completed, each of `tokens` tokens in the same time (its decode rate); its
    engine died (engine_death fired) or not."""
    from loadrepro.records import Outcome
    from tests.builders import record
    from tests.test_reports import fixed_report

    rows = fixed_report().model_copy().request_table[0]
    table = []
    for i, n in enumerate(tokens):
        r = record(i, Outcome.OK, end_s=1.0 + i, conversation=i, tokens=n)
        table.append(rows.model_copy(update={"conversation": i, "turn": 1, "outcome": "ok", "output_tokens": n,
                                             "ttft_ms": (r.first_token_ns - r.sent_ns) / 1e6,
                                             "e2e_ms": (r.end_ns - r.sent_ns) / 1e6}))
    report = fixed_report()
    rules = [r.model_copy(update={"fired": died}) if r.name == "engine_death" else r for r in report.rules]
    return report.model_copy(update={"request_table": table, "verdict": verdict, "rules": rules})


def test_a_decode_rate_drop_is_a_regression_only_when_it_is_not_noise():
    from loadrepro.compare.comparison import Conclusion, compare
    from loadrepro.config.profile import VerdictSpec

    stock = _side([16] * 12, "fail")
    slower = compare(stock, _side([10] * 12, "pass"), VerdictSpec())  # every request 37% slower to decode
    assert slower.conclusion is Conclusion.REGRESSES and slower.detail.startswith("decode "), slower.detail
    # stock's engine died: the requests it completed are those it finished before, its quickest, no baseline
    died = compare(_side([16] * 12, "fail", died=True), _side([10] * 12, "pass"), VerdictSpec())
    assert died.conclusion is Conclusion.FIX_CONFIRMED, died.detail
    assert "latency not judged against stock (decode 40 -> 25 tokens/s" in died.detail, died.detail
    mixed = compare(_side([16] * 7 + [8] * 5, "fail"), _side([16] * 5 + [8] * 7, "pass"), VerdictSpec())
    assert mixed.conclusion is Conclusion.FIX_CONFIRMED, mixed.detail  # medians apart, the interval holds none


def _run(ttft_ms: float, n: int = 100, seed: int = 0) -> list[RequestRow]:
    """One run's completed requests, TTFT near `ttft_ms` (2 ms of noise), conversations 0..n-1."""
    rng = np.random.default_rng(seed)
    return [RequestRow(id=i, conversation=i, turn=1, outcome="ok", status=200,
                       ttft_ms=float(ttft_ms + rng.normal(0, 2)), e2e_ms=ttft_ms + 310, output_tokens=32,
                       cached_tokens=None, shared_prefix_tokens=0) for i in range(n)]


def test_trials_are_resampled_whole_so_one_slow_trial_is_not_a_regression():
    """Three trials a side whose patched runs came out +30, -20 and +25 ms against stock's 100 ms: requests of one
    run share that run's machine, so the interval resamples the trials, and three trials that disagree in sign
    show no change; the same requests taken as one run (independent requests) would call it a regression."""
    stock = [_run(100, seed=k) for k in range(3)]
    patched = [_run(130, seed=10), _run(80, seed=11), _run(125, seed=12)]
    [by_trial, *_] = latency_changes(stock, patched)
    assert by_trial.metric.startswith("TTFT p50") and by_trial.verdict == "no significant change", by_trial
    assert by_trial.ci95[0] < 0 < by_trial.ci95[1], by_trial
    [pooled, *_] = latency_changes([[r for run in stock for r in run]], [[r for run in patched for r in run]])
    # as one run, its requests resampled one by one, the interval is narrow: the +25 ms p50 "regressed"
    assert pooled.verdict == "regressed", pooled


def test_a_consistent_slowdown_over_trials_is_a_regression():
    stock = [_run(100, seed=k) for k in range(4)]
    patched = [_run(125, seed=10 + k) for k in range(4)]
    [ttft, *_] = latency_changes(stock, patched)
    assert ttft.verdict == "regressed" and 20 < ttft.difference < 30, ttft


def _drifting(first_ms: float, second_ms: float, n: int = 40) -> list[RequestRow]:
    """A run whose first half had TTFTs near `first_ms` and second half near `second_ms` (1 ms of noise)."""
    return [r.model_copy(update={"ttft_ms": r.ttft_ms - 100 + (first_ms if i < n // 2 else second_ms)})
            for i, r in enumerate(_run(100, n=n, seed=n))]


def test_noise_scales_with_the_figure_and_with_what_one_engine_does_against_itself():
    """A 30% slower TTFT of 100 ms (+30 ms) is beyond noise; the same engine on a machine whose load changed during
    the first run (its halves 100 and 140 ms) is within it; 6 ms against 13 ms is under the client's timing floor."""
    [slower, *_] = latency_changes([_drifting(100, 100)], [_drifting(130, 130)])
    assert slower.verdict == "regressed" and within_noise(slower) is None, slower
    assert slower.noise is not None and slower.noise < 5, slower
    [drifted, *_] = latency_changes([_drifting(100, 140)], [_drifting(130, 130)])
    assert drifted.noise is not None and drifted.noise > 35 and within_noise(drifted) is not None, drifted
    [tiny, *_] = latency_changes([_drifting(6, 6)], [_drifting(13, 13)])
    assert tiny.verdict == "regressed" and tiny.difference < TTFT_FLOOR_MS and within_noise(tiny) is not None, tiny
