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
    assert "TTFT not judged: 3 requests were sent after it, fewer than 8 (the load ended)" in r.detail


def test_a_groups_worth_sent_after_a_fault_and_none_served_is_never_back():
    r = judged([Outcome.TIMEOUT] * 10)
    assert not r.recovered and r.ttft_judged and r.ttft_s is None, r.detail
    assert "TTFT p95 never back within" in r.detail


def test_a_groups_worth_served_as_before_is_back():
    r = judged([Outcome.OK] * 8)
    assert r.recovered and r.ttft_s is not None, r.detail
