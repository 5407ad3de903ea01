"""The gate and the noise between runs: two runs of one unchanged engine differ by more than the halves of one run
do (a nightly TTFT p50 read +12% one night and -41% the next), so the gate never closes on that. Recorded runs of
a stub engine whose every run is a little faster or slower as a whole (its machine's load, its caches, its clocks),
as real engines' are: unchanged, the gate stays open, given trials or a history or neither; slowed, it closes where
the noise between runs is known (trials, a history), and with one run a side it says it cannot tell."""

from __future__ import annotations

import numpy as np

from loadrepro.compare.gate import CANNOT_TELL, MIN_HISTORY, gate, history_of
from loadrepro.schema.report_sections import RequestRow
from loadrepro.schema.run_report import RunReport

# Each run's pace against the engine's usual, as one engine's nights went: within a run the requests agree (its
# halves a few % apart), between runs the whole run moves by up to a fifth.
PACES = (1.0, 1.16, 0.87, 1.05, 0.93, 1.12, 0.9, 1.02)
SLOWED = 2.0


def run_rows(pace: float, seed: int, n: int = 80) -> list[RequestRow]:
    """One run's completed requests of 32 tokens: TTFT around 400 ms and 20 ms between tokens, times `pace`."""
    rng = np.random.default_rng(seed)
    made = []
    for i in range(n):
        ttft = float(rng.gamma(100, 4)) * pace
        itl = float(rng.normal(20, 0.5)) * pace
        made.append(RequestRow(id=i, conversation=i, turn=1, outcome="ok", status=200, ttft_ms=ttft,
                               e2e_ms=ttft + 31 * itl, output_tokens=32, cached_tokens=None, shared_prefix_tokens=0))
    return made


def report() -> RunReport:
    """What the gate reads of a report besides the rows given: no SLO, no rule fired."""
    return RunReport.model_construct(slo=None, rules=[])


def gated(baseline: list[list[RequestRow]], run: list[list[RequestRow]], history=None):
    return gate(report(), report(), 0.05, (baseline, run), history)


def test_one_run_a_side_of_an_unchanged_engine_leaves_it_open_and_says_it_cannot_tell():
    result = gated([run_rows(PACES[0], 1)], [run_rows(PACES[1], 2)])  # +16%, the halves of each agreeing
    assert result.passed, result.detail
    assert result.detail.startswith("open, undecided: TTFT p50") and CANNOT_TELL in result.detail
    assert result.between_runs.startswith("none")


def test_one_run_a_side_slowed_cannot_close_on_latency_but_says_so():
    result = gated([run_rows(1.0, 1)], [run_rows(SLOWED, 2)])
    assert result.passed and CANNOT_TELL in result.detail
    assert {c.figure for c in result.checks if CANNOT_TELL in c.change} >= {"TTFT p50 (ms)", "TTFT p95 (ms)"}


def test_trials_of_an_unchanged_engine_leave_it_open():
    for start in range(0, 6, 3):  # two pairs of nights, three trials a side, each trial its own pace
        night = [run_rows(PACES[(start + i) % len(PACES)], 10 + start + i) for i in range(3)]
        other = [run_rows(PACES[(start + 3 + i) % len(PACES)], 20 + start + i) for i in range(3)]
        result = gated(night, other)
        assert result.passed, result.detail
        assert result.between_runs.startswith("the gap between each side's trials (3 and 3)")


def test_trials_of_a_slowed_engine_close_it_on_ttft():
    baseline = [run_rows(PACES[i], 10 + i) for i in range(3)]
    slowed = [run_rows(SLOWED * PACES[3 + i], 20 + i) for i in range(3)]
    result = gated(baseline, slowed)
    assert not result.passed
    closed = {c.figure for c in result.checks if c.closed}
    assert {"TTFT p50 (ms)", "ITL p50 (ms, each request's mean)"} <= closed, result.detail


def test_a_history_of_an_unchanged_engine_leaves_one_run_a_side_open():
    history = history_of([run_rows(pace, 30 + i) for i, pace in enumerate(PACES[2:])])
    result = gated([run_rows(PACES[0], 1)], [run_rows(PACES[1], 2)], history)
    assert result.passed and CANNOT_TELL not in result.detail, result.detail
    ttft = next(c for c in result.checks if c.figure == "TTFT p50 (ms)")
    assert "earlier runs of the history" in ttft.change
    assert result.between_runs == f"the spread of {len(PACES) - 2} earlier runs (--history)"


def test_a_history_lets_one_run_a_side_of_a_slowed_engine_close_it():
    history = history_of([run_rows(pace, 30 + i) for i, pace in enumerate(PACES[2:])])
    result = gated([run_rows(PACES[0], 1)], [run_rows(SLOWED * PACES[1], 2)], history)
    assert not result.passed
    assert "TTFT p50 (ms)" in {c.figure for c in result.checks if c.closed}, result.detail


def test_a_history_too_short_to_tell_is_said_and_not_used():
    history = history_of([run_rows(pace, 30 + i) for i, pace in enumerate(PACES[:MIN_HISTORY - 1])])
    assert history.noise("TTFT p50 (ms)") is None
    result = gated([run_rows(PACES[0], 1)], [run_rows(SLOWED, 2)], history)
    assert result.passed and CANNOT_TELL in result.detail
    assert result.between_runs.startswith(f"none from --history: {MIN_HISTORY - 1} earlier run(s)")


def test_a_history_is_a_directory_and_only_the_gate_reads_one(tmp_path):
    from tests.helpers import cli

    alone = cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--history", str(tmp_path))
    assert alone.returncode == 2 and "only --gate reads a history" in alone.stdout + alone.stderr
    missing = cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--gate", "--history", str(tmp_path / "no"))
    assert missing.returncode == 2 and "not a directory of earlier runs" in missing.stdout + missing.stderr
