"""Recovery from a fault on purpose, judged from records alone (judge/recovery.py): too few requests after a fault
near the load's end is not "never back", while a group's worth sent after it and none served is."""

from __future__ import annotations

import dataclasses

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.recovery import recovery
from loadrepro.records import Fault, Outcome
from tests.builders import START, S, record, result

PAUSE = Fault("pause", START + 3 * S, START + 4 * S, START + 4 * S, 10.0, "SIGSTOP ...")


def judged(after: list[Outcome]):
    before = [record(i, end_s=0.6 + i * 0.1) for i in range(20)]
    later = [record(100 + i, outcome, end_s=4.6 + i * 0.05) for i, outcome in enumerate(after)]
    return recovery(dataclasses.replace(result(before + later, duration_s=6.0), faults=(PAUSE,)), PAUSE,
                    VerdictSpec())


def test_too_few_requests_after_a_fault_leave_its_ttft_unjudged_not_failed():
    r = judged([Outcome.OK] * 3)
    assert r.recovered and not r.ttft_judged and r.sent_after == 3, r.detail
    assert r.parts() == {"health": "back", "ttft": "not_judged", "running": "not_judged", "kv": "not_judged"}


def test_a_groups_worth_sent_after_a_fault_and_none_served_is_never_back():
    r = judged([Outcome.TIMEOUT] * 10)
    assert not r.recovered and r.ttft_judged and r.ttft_s is None, r.detail
    assert r.parts()["ttft"] == "not_back", r.detail


def test_a_groups_worth_served_as_before_is_back():
    r = judged([Outcome.OK] * 8)
    assert r.recovered and r.ttft_s is not None, r.detail


def test_a_run_that_ends_before_the_recovery_window_is_over_leaves_the_way_back_unjudged():
    """/health back, first tokens not yet back, and the run over 2 s after the fault of a 10 s window: what the
    engine would have done in the other 8 s was not watched, so no_recovery says so and does not fail the run.
    The same records with a window the run outlasted: never back, a failure."""
    from loadrepro.judge.measurements import measure
    from loadrepro.judge.soak import no_recovery

    spec = VerdictSpec()
    before = [record(i, end_s=0.6 + i * 0.1) for i in range(20)]
    later = [record(100 + i, Outcome.TIMEOUT, end_s=4.6 + i * 0.05) for i in range(10)]
    for window_s, cut_short, severity in ((10.0, True, "info"), (1.0, False, "fail")):
        fault = dataclasses.replace(PAUSE, recover_within_s=window_s)
        run = dataclasses.replace(result(before + later, duration_s=6.0), faults=(fault,))
        r = recovery(run, fault, spec)
        assert not r.recovered and r.health_s is not None and r.cut_short is cut_short, r.detail
        found = no_recovery(run, spec, measure(run, spec))
        assert found is not None and found.severity == severity, found
