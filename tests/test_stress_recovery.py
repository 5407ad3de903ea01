"""Rule degradation as the stress battery's ramp-recovery phase needs it: the drain of a run's last slow requests,
a window of its own with a few of them, does not hide the growth the windows before it show."""

from __future__ import annotations

from loadrepro.judge.soak import degradation
from tests.builders import ruled
from tests.test_statistics import SPEC, steady_run


def test_a_drain_window_of_a_few_slow_requests_does_not_hide_degradation():
    """Windows of nine requests, the last two windows' eleven times slower than the reference's, then the run's
    two last requests ending in a window of their own: the last window with five first tokens is compared."""
    found = ruled(degradation, steady_run([900.0, 100.0, 100.0, 1100.0, 1100.0, [1100.0, 1100.0]]), SPEC)
    assert found is not None and "to 1,10" in found.summary and "in window 5 (12-15 s)" in found.summary, found


def test_a_drain_window_of_a_few_slow_requests_after_steady_windows_is_not_degradation():
    assert ruled(degradation, steady_run([900.0, 100.0, 100.0, 100.0, [1100.0, 1100.0]]), SPEC) is None
