"""Recovery from a fault on purpose, judged from records alone (judge/recovery.py): too few requests after a fault
near the load's end is not "never back", while a group's worth sent after it and none served is."""

from __future__ import annotations

import dataclasses

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.recovery import recovery
from loadrepro.records import Fault, Outcome
from tests.builders import START, S, metrics, record, result

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


KILL = Fault("kill", START + 3 * S, START + 4 * S, START + 4 * S + S // 4, 30.0, "SIGKILL ...")


def with_scrapes(fault: Fault, scrapes: list[tuple[float, float, int]], after: list[Outcome]):
    """Requests before and after `fault`, and scrapes (t_s, the engine's running count, loadrepro's in flight)."""
    before = [record(i, end_s=0.6 + i * 0.1) for i in range(20)]
    later = [record(100 + i, outcome, end_s=4.6 + i * 0.05) for i, outcome in enumerate(after)]
    scraped = [dataclasses.replace(metrics(t, vllm__num_requests_running=running), in_flight=flight)
               for t, running, flight in scrapes]
    run = dataclasses.replace(result(before + later, metrics=scraped, duration_s=60.0), faults=(fault,))
    return recovery(run, fault, VerdictSpec())


def test_a_metrics_endpoint_silent_for_a_while_after_a_restart_does_not_stretch_the_recovery():
    """llama.cpp's /metrics answers 503 while it loads its model again, and went on being unscraped: the first scrape
    after the engine was back came 40 s later, and the recovery read 40 s where /health and first tokens were back
    in a fraction of a second. The running count was back when /health was, the first scrape after it says so."""
    r = with_scrapes(KILL, [(2.0, 4, 4), (44.0, 0, 0)], [Outcome.OK] * 8)
    assert r.recovered and r.running_s == r.health_s == 0.25, r.detail
    assert r.recovery_s is not None and r.recovery_s < 1.5, r.detail


def test_an_engine_seen_running_more_than_loadrepro_sent_after_a_restart_is_back_only_once_it_is_not():
    """Scrapes after /health 200 that see requests the engine never freed: the running count is back at the first
    scrape that sees no more than loadrepro's in flight, and the recovery is that long."""
    r = with_scrapes(KILL, [(2.0, 4, 4), (5.0, 9, 2), (8.0, 9, 2), (20.0, 1, 1)], [Outcome.OK] * 8)
    assert r.recovered and r.running_s == 16.0 and r.recovery_s == 16.0, r.detail
    never = with_scrapes(KILL, [(2.0, 4, 4), (5.0, 9, 2), (20.0, 9, 1)], [Outcome.OK] * 8)
    assert not never.recovered and never.parts()["running"] == "not_back", never.detail


def test_a_metrics_endpoint_that_never_answers_after_a_restart_leaves_the_running_count_unjudged():
    """No scrape answered after /health 200 again: nothing says the engine kept requests, nor that it did not."""
    r = with_scrapes(KILL, [(2.0, 4, 4)], [Outcome.OK] * 8)
    assert r.recovered and r.parts()["running"] == "not_judged", r.detail
    assert "/metrics answered no running count after /health 200 again" in r.detail, r.detail


def test_a_fault_that_stops_nothing_owns_none_of_the_requests_an_outage_failed():
    """A malformed fault going on while a kill had the engine down: the kill's failed requests are the kill's, not
    the malformed fault's (one definition, records.FaultSpans, for the runner and for each fault's row)."""
    malformed = Fault("malformed", START + 1 * S, START + 1 * S, START + 50 * S, 60.0, "40 malformed requests")
    failed = [dataclasses.replace(record(200 + i, Outcome.FAULTED, end_s=4.1), queued_ns=START + 3 * S,
                                  sent_ns=START + 3 * S) for i in range(6)]
    before = [record(i, end_s=0.6 + i * 0.1) for i in range(20)]
    run = dataclasses.replace(result(before + failed, duration_s=60.0), faults=(malformed, KILL))
    assert recovery(run, malformed, VerdictSpec()).faulted == 0
    assert recovery(run, KILL, VerdictSpec()).faulted == 6


def test_a_fault_still_going_on_when_another_is_caused_leaves_the_requests_before_it_to_judge_it_by():
    """Malformed requests from 1 s to 50 s (each kind's /health watch), a kill at 3 s: the kill's TTFT before it is
    the requests served before it, not none (those since the malformed fault was over, after the kill)."""
    malformed = Fault("malformed", START + 1 * S, START + 1 * S, START + 50 * S, 60.0, "40 malformed requests")
    before = [record(i, end_s=0.6 + i * 0.1) for i in range(20)]
    later = [record(100 + i, end_s=4.9 + i * 0.05) for i in range(8)]
    run = dataclasses.replace(result(before + later, duration_s=60.0), faults=(malformed, KILL))
    r = recovery(run, KILL, VerdictSpec())
    assert r.before_ttft_p95_ms is not None and r.parts()["ttft"] == "back", r.detail
