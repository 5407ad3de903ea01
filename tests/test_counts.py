"""The bounded counters a tally keeps for what rules read per request: exact where they say so, and bounded."""

import numpy as np
import pytest

from loadrepro.records.counts import ERROR_SCALE, RECENT_ENDS, PerSecond, PromptErrors, RecentEnds


def test_an_error_of_exactly_the_limit_is_within_it_and_one_token_more_is_beyond():
    errors = PromptErrors()
    errors.add(1, 0, 1, planned=1000, measured=1050)
    errors.add(2, 0, 2, planned=3000, measured=2849)  # -5.0333%
    assert errors.beyond(0.05) == 1 and errors.beyond(0.0503) == 1 and errors.beyond(0.0504) == 0
    assert errors.worst.request == 2 and errors.worst.error == pytest.approx(-151 / 3000)


def test_percentiles_are_within_one_ten_thousandth_of_the_exact_lower_rank():
    rng = np.random.default_rng(4)
    planned = rng.integers(100, 40_000, 3000)
    measured = (planned * rng.normal(1.0, 0.03, 3000)).astype(int)
    errors = PromptErrors()
    for i, (p, m) in enumerate(zip(planned.tolist(), measured.tolist(), strict=True)):
        errors.add(i, i, 1, p, m)
    size = np.sort(np.abs((measured - planned) / planned))
    for q in (50, 95, 100):
        exact = size[int(q / 100 * (size.size - 1))]
        assert exact <= errors.percentile(q) <= exact + 1 / ERROR_SCALE
    assert errors.total / errors.count == pytest.approx(np.mean((measured - planned) / planned))


def test_errors_beyond_the_cap_share_a_count_and_the_largest_is_kept_exactly():
    errors = PromptErrors()
    errors.add(1, 0, 1, planned=10, measured=90)  # +800%
    errors.add(2, 0, 1, planned=10, measured=100)  # +900%
    assert len(errors.by_size) == 1 and errors.percentile(100) == pytest.approx(9.0)


def test_recent_ends_count_exactly_until_the_oldest_are_forgotten_and_say_so_after():
    ends = RecentEnds()
    for i in range(2 * RECENT_ENDS + 10):
        ends.add(end_ns=i, failed=i % 4 == 0)
    assert len(ends.ends) <= 2 * RECENT_ENDS and ends.forgotten == RECENT_ENDS
    t = 2 * RECENT_ENDS - 100  # 110 later
    assert ends.since(t) == (sum(1 for i in range(t, 2 * RECENT_ENDS + 10) if i % 4 == 0), 110, True)
    failed, later, complete = ends.since(0)
    assert later == len(ends.ends) and not complete


def test_in_flight_per_second_is_the_level_at_the_end_of_each_second():
    flow = PerSecond()
    for sent, end in ((0.2, 1.5), (0.5, 0.7), (2.1, 2.2), (1.9, 3.4)):
        flow.add(sent, end)
    flow.add(None, 0.3)  # never sent: not in flight
    assert flow.in_flight() == ([0.0, 0.0, 1.0, 2.0, 3.0], [0, 1, 1, 1, 0])
