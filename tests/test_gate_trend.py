"""The gate's change-point pass over a nightly history: recorded runs of a stub engine, night by night, oldest
first, as a nightly job's --history holds them. Unchanged nights with this machine's noise between runs (TTFT p50
up to 40% apart) leave it open; a step that began at night 9, or a creep of 3% a night that no pair of nights
shows, closes it and names where the change began; a history too short to judge says so."""

from __future__ import annotations

import numpy as np

from loadrepro.compare.changepoint import change_points
from loadrepro.compare.gate import MIN_SERIES, History, gate, history_of
from loadrepro.schema.report_sections import RequestRow
from tests.test_gate_noise import PACES, report, run_rows

NIGHTS = 12
TTFT = "TTFT p50 (ms)"


def noisy_paces(seed: int) -> list[float]:
    """Each night's pace: this machine's runs of one unchanged engine, TTFT p50 within about 40% of each other."""
    return [float(x) for x in np.exp(np.random.default_rng(seed).normal(0, 0.2, NIGHTS))]


def nightly(paces: list[float]) -> tuple[list[list[RequestRow]], History]:
    """Each night's requests, and the history the last night is gated with: every earlier night, named."""
    nights = [run_rows(pace, 100 + i) for i, pace in enumerate(paces)]
    return nights, history_of(nights[:-1], [f"night-{i + 1:02d}" for i in range(len(nights) - 1)])


def gated_tonight(paces: list[float]):
    """Tonight (the last night) against last night, one run a side, with the earlier nights as --history."""
    nights, history = nightly(paces)
    return gate(report(), report(), 0.05, ([nights[-2]], [nights[-1]]), history)


def trend_check(result, figure: str = TTFT):
    return next((c for c in result.checks if c.figure == f"{figure}, change point"), None)


def test_unchanged_nights_with_this_machines_noise_leave_it_open():
    for seed in range(4):
        paces = noisy_paces(seed)
        assert max(paces) / min(paces) > 1.4, paces  # the noise the gate must not close on
        result = gated_tonight(paces)
        assert result.passed, (seed, result.detail)
        assert not any(c.closed for c in result.checks)
        assert f"{TTFT}: no change point over {NIGHTS} runs" in result.change_points, result.change_points


def test_a_step_at_night_9_closes_it_and_names_night_9():
    paces = [PACES[i % len(PACES)] * (1.5 if i >= 8 else 1.0) for i in range(NIGHTS)]
    result = gated_tonight(paces)
    assert not result.passed
    check = trend_check(result)
    assert check is not None and check.closed, result.detail
    assert "from night-09, run 9 of 12" in check.change, check.change
    assert f"{TTFT}: a change point at night-09" in result.change_points
    before, after = (float(cell.split()[0]) for cell in (check.baseline, check.run))
    assert 1.3 < after / before < 1.7, (before, after)


def test_a_creep_of_3_percent_a_night_closes_it_where_no_pair_of_nights_does():
    """On a quiet machine (runs within 5% of each other): each night is 3% slower than the last, under the
    tolerance, so no pair closes; the series shows it. (Under this machine's 40% noise, a one-run-a-night series
    of 12 nights cannot tell a 3% creep, and the gate does not claim to.)"""
    paces = [(1 + (PACES[i % len(PACES)] - 1) * 0.3) * 1.03 ** i for i in range(NIGHTS)]
    nights, history = nightly(paces)
    pair = gate(report(), report(), 0.05, ([nights[-2]], [nights[-1]]), history)
    assert not any(c.closed for c in pair.checks if "change point" not in c.figure)  # no pair shows it
    check = trend_check(pair)
    assert check is not None and check.closed and not pair.passed, pair.detail


def test_a_history_too_short_says_it_cannot_judge_a_change_point():
    nights, _ = nightly([PACES[i] for i in range(MIN_SERIES - 1)])
    history = history_of(nights[:-1])
    result = gate(report(), report(), 0.05, ([nights[-2]], [nights[-1]]), history)
    assert f"{TTFT}: cannot judge a change point from {MIN_SERIES - 1} runs" in result.change_points
    assert trend_check(result) is None


def test_a_change_kept_in_the_history_does_not_widen_its_noise_between_runs():
    """Every night is kept, the regressed ones too: the noise is the spread within the history's segments."""
    steady = [PACES[i % len(PACES)] for i in range(NIGHTS)]
    stepped = [pace * (1.5 if i >= 6 else 1.0) for i, pace in enumerate(steady)]
    quiet, loud = (nightly(p)[1].noise(TTFT) for p in (steady, stepped))
    assert quiet is not None and loud is not None
    values = nightly(stepped)[1].figures[TTFT]
    whole = 2.3 * float(np.std(values, ddof=1)) * np.sqrt(2)  # the spread of every night, the step included
    assert loud < 1.5 * quiet and loud < 0.7 * whole, (quiet, loud, whole)


def test_change_points_are_seeded_and_split_where_the_series_changes():
    series = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 2.0, 2.1, 1.9, 2.05, 1.95, 2.0]
    found = change_points(series, 0.01)
    assert [c.index for c in found] == [6] and found == change_points(series, 0.01)
    assert change_points([1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 1.02, 0.97], 0.01) == []


def test_an_engine_fixed_tonight_after_a_regression_is_not_held_to_the_regressed_nights():
    paces = [PACES[i % len(PACES)] * (1.6 if 7 <= i < NIGHTS - 1 else 1.0) for i in range(NIGHTS)]
    result = gated_tonight(paces)
    assert not any(c.closed for c in result.checks if "change point" in c.figure), result.detail
    assert (f"{TTFT}: a change point at night-08, run 8 of 12" in result.change_points and
            "tonight's segment is worse, but tonight's run is nearer the mean before it" in result.change_points)
