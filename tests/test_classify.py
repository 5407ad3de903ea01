"""Each rule fires at its threshold and not below it."""

import dataclasses

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.admission import prefix_reuse_missing, rejections, throttling
from loadrepro.judge.classify import (
    Severity,
    engine_death,
    failures_while_healthy,
    fatal_signature,
    interrupted,
    low_completion,
    post_run_health,
    pressure_in_metrics,
    protocol_errors,
    stalled_streams,
    truncated_streams,
)
from loadrepro.judge.judgement import judge
from loadrepro.records import Outcome, StopReason
from tests.builders import health, log_match, metrics, note, record, result, ruled

SPEC = VerdictSpec()
FATAL = "Failed to resume draft KV cache for request 53"


def test_engine_death_needs_two_unhealthy_polls_or_a_dead_end():
    one_blip = result([record(1)], health(200, 200, 503, 200, 200))
    assert engine_death(one_blip, SPEC) is None
    died = result([record(1), record(2, Outcome.SERVER_ERROR, end_s=2.2, detail=FATAL, signature=
                  "trtllm-draft-resume-failed")], health(200, 200, 503, 503, 503), post=503)
    finding = engine_death(died, SPEC)
    assert finding.severity is Severity.FAIL
    assert finding.facts == {"t_s": 2.0, "judged_by": "health_after_run", "signature": "trtllm-draft-resume-failed",
                             "failed_after": 1, "ending_after": 1, "health_after": "down", "health_status": 503}
    judged = note(1.0, "death", "/health answered 503 2 times in a row while requests failed and the engine made "
                                "no progress")
    came_back = result([record(1)], health(200, 503, 503, 200, 200), notes=[judged])
    found = engine_death(came_back, SPEC).facts
    assert (found["judged_by"], found["health_after"], found["health_status"]) == ("death", "back", 503), found
    assert judged.text in engine_death(came_back, SPEC).summary  # the runner's words on how it was judged
    # The same /health without the runner's judgement (nothing failed, or tokens kept coming) is no death: SGLang's
    # /health answers 503 when its own generation waits too long behind the load.
    assert engine_death(result([record(1)], health(200, 503, 503, 200, 200)), SPEC) is None
    last_word = result([record(1)], health(200, 200), post=503)
    assert engine_death(last_word, SPEC) is not None


def test_engine_death_from_a_process_exit_and_not_from_a_health_endpoint_that_never_worked():
    exited = result([record(1)], notes=[note(1.5, "engine", "the engine process killed by SIGKILL")])
    assert engine_death(exited, SPEC).facts["judged_by"] == "engine"
    never = result([record(1)], health(404, 404, 404), post=404)
    assert engine_death(never, SPEC) is None


def test_failures_while_healthy_need_health_to_stay_200_around_them():
    hidden = result([record(1, Outcome.SERVER_ERROR, end_s=1.5, detail="boom", status=500)])
    assert failures_while_healthy(hidden, SPEC).facts == {"requests": 1, "failed": 1, "first_request": 1,
                                                          "first_outcome": "server_error"}
    at_death = result([record(1, Outcome.SERVER_ERROR, end_s=1.5, status=500)], health(200, 200, 503, 503, 503))
    assert failures_while_healthy(at_death, SPEC) is None


def test_failures_the_load_ended_soon_after_count_by_the_last_word_of_health():
    """Polls at 0..4 s: failures at 3.5 and 4.5 s have fewer than HEALTHY_MARGIN_POLLS polls after them before the
    load ended; /health's 200 after the run stands for the rest, so all 3 count; a 503 after the run counts none of
    those two, and the words say how many of the failed requests were counted and why not the others."""
    failed = [record(i, Outcome.STREAM_ERROR, end_s=end, detail="Context size has been exceeded.")
              for i, end in ((1, 1.5), (2, 3.5), (3, 4.5))]
    finding = failures_while_healthy(result(failed, health(200, 200, 200, 200, 200)), SPEC)
    assert finding.facts["requests"] == 3 and finding.facts["failed"] == 3
    assert finding.summary.startswith("3 requests failed while /health answered 200 (first: request 1,")
    dying = failures_while_healthy(result(failed, health(200, 200, 200, 200, 200), post=503), SPEC)
    assert dying.facts["requests"] == 1 and dying.facts["failed"] == 3
    assert dying.summary.startswith("1 of the 3 failed requests ended while /health answered 200")
    assert dying.summary.endswith("; of the others, 2 met a /health other than 200")
    unasked = failures_while_healthy(result(failed, health(200, 200, 200, 200, 200), post=None), SPEC)
    assert unasked.facts["requests"] == 1 and unasked.summary.endswith("; of the others, 2 were not polled before "
                                                                       "and after")


def test_fatal_signature_names_the_log_line_and_strips_the_timestamp():
    r = result([record(1)], log_matches=[log_match(2.0, f"2026-11-30 06:00:00.000 ERROR [RANK 0] {FATAL}",
                                                    "trtllm-draft-resume-failed", number=412)],
               log_context=["line before"])
    finding = fatal_signature(r, SPEC)
    assert "engine log line 412" in finding.summary and f"`{FATAL}`" in finding.summary
    assert "at 2.0 s" in finding.summary and "2026-11-30" not in finding.summary
    benign = result([record(1)], log_matches=[log_match(1.0, "KV cache pool is full. Retract requests.",
                                                         "sglang-retract", "T")])
    assert fatal_signature(benign, SPEC) is None


def test_count_rules_fire_on_one():
    for rule, outcome in ((stalled_streams, Outcome.STALLED), (truncated_streams, Outcome.TRUNCATED)):
        assert rule(result([record(1)]), SPEC) is None
        assert rule(result([record(1), record(2, outcome)]), SPEC).summary.startswith("1 ")


def test_count_rules_name_how_many_and_the_first_to_end():
    for rule, outcome, words in (
            (stalled_streams, Outcome.STALLED, "streams stalled (no byte for stall_timeout_s)"),
            (truncated_streams, Outcome.TRUNCATED, "streams or connections cut before a finish"),
            (protocol_errors, Outcome.PROTOCOL_ERROR, "responses were not valid OpenAI JSON/SSE")):
        found = rule(result([record(1), record(2, outcome, end_s=3.0), record(3, outcome, end_s=2.0)]), SPEC)
        assert (found.rule, found.severity, found.summary) == (
            rule.__name__, Severity.FAIL, f"2 {words} (first: request 3 at 2.0 s)")
        cold = {"cold_start_s": -1.0} if rule is stalled_streams else {}  # no fresh engine known: not a cold start
        assert found.facts == {"requests": 2, "first_request": 3, "first_t_s": 2.0, "waited_behind": "",
                                 "cancelled_before": 0, **cold}
        assert rule.__doc__.startswith(f"Any request whose outcome is `{outcome}` ({words}); threshold: one.")


def test_low_completion_threshold_excludes_rejections_and_cancellations():
    records = [record(i) for i in range(9)] + [record(9, Outcome.SERVER_ERROR)]
    assert low_completion(result(records), VerdictSpec(min_completed=0.9)) is None
    assert "9/10" in low_completion(result(records), VerdictSpec(min_completed=0.95)).summary
    polite = [record(1), record(2, Outcome.REJECTED), record(3, Outcome.CANCELLED)]
    assert low_completion(result(polite), SPEC) is None
    assert low_completion(result([record(1, Outcome.REJECTED)]), SPEC) is None  # refused cleanly, nothing admitted
    nothing = [record(1, Outcome.REJECTED), record(2, Outcome.CANCELLED)]
    assert low_completion(result(nothing), SPEC).summary == "no request completed"


def test_post_run_health_and_interruption():
    assert post_run_health(result([record(1)], post=200), SPEC) is None
    assert post_run_health(result([record(1)], post="unreachable"), SPEC).summary == "/health unreachable after the run"
    assert post_run_health(result([record(1)], post=503), VerdictSpec(require_post_health=False)) is None
    assert interrupted(result([record(1)], interrupted=True), SPEC).severity is Severity.FAIL
    assert interrupted(result([record(1)], interrupted=True), SPEC).summary == (
        "the run was interrupted before its workload finished")
    assert interrupted(result([record(1)]), SPEC) is None


def test_a_crashed_load_worker_fails_the_run_as_loadrepros_own_failure():
    crashed = dataclasses.replace(result([record(1)]), stop_reason=StopReason.WORKER_CRASHED)
    found = interrupted(crashed, SPEC)
    assert (found.rule, found.severity, found.summary) == (
        "interrupted", Severity.FAIL, "a load worker crashed before the workload finished: loadrepro's own "
                                      "failure, not the engine's, and the run proves nothing")


def test_rejections_are_info_unless_forbidden():
    r = result([record(1), record(2, Outcome.REJECTED, detail="This model's maximum context length is 8 tokens")])
    assert rejections(r, SPEC).severity is Severity.INFO
    assert rejections(r, VerdictSpec(allow_rejected=False)).severity is Severity.FAIL
    assert judge(r, SPEC).verdict.status == "pass"


def test_throttling_and_pressure_are_info():
    assert throttling(result([record(1, retries=2)]), SPEC).summary == "0 requests throttled after retries; 2 retries"
    samples = [metrics(0.5, vllm__num_preemptions_total=0, vllm__num_requests_waiting=0, vllm__kv_cache_usage_perc=0.2),
               metrics(1.5, vllm__num_preemptions_total=3, vllm__num_requests_waiting=5,
                       vllm__kv_cache_usage_perc=0.97)]
    finding = ruled(pressure_in_metrics, result([record(1)], metrics=samples), SPEC)
    assert finding.severity is Severity.INFO
    assert finding.summary == "pressure handled: 3 preemptions, up to 5 requests waiting, KV usage peaked at 97%"
    calm = [metrics(0.5, vllm__num_requests_waiting=0, vllm__kv_cache_usage_perc=0.5)]
    assert ruled(pressure_in_metrics, result([record(1)], metrics=calm), SPEC) is None


def test_prefix_reuse_threshold():
    spec = VerdictSpec(min_cache_hit=0.8)
    good = [record(1, turn=2, shared=1000, cached=800)]
    bad = [record(1, turn=2, shared=1000, cached=799)]
    assert prefix_reuse_missing(result(good), spec) is None
    assert "1/1 later turns" in prefix_reuse_missing(result(bad), spec).summary
    assert prefix_reuse_missing(result(bad), SPEC) is None  # not asked for
    silent = [record(1, turn=2, shared=1000, cached=None)]
    assert prefix_reuse_missing(result(silent), spec).severity is Severity.INFO


def test_verdict_reasons_come_from_failing_rules_in_order():
    r = result([record(1), record(2, Outcome.STALLED, end_s=2.0)], post=503)
    verdict = judge(r, SPEC).verdict
    assert verdict.status == "fail"
    assert verdict.reasons[0] == "engine died at 5.0 s; /health 503 from then on"  # the post-run poll was 503
    assert verdict.reasons[1].startswith("1 request failed while /health answered 200")
    assert verdict.reasons[2].startswith("1 streams stalled") and verdict.reasons[-1] == "/health 503 after the run"
    assert judge(result([record(1)]), SPEC).verdict.status == "pass"


def test_zombies_say_how_loadrepros_requests_were_cancelled():
    """After the load the engine still runs requests: the words say how many of loadrepro's were cancelled
    mid-stream and how many while their whole answers were made ([workload] stream = false)."""
    from loadrepro.judge.classify import zombie_requests

    cancelled = [record(i, Outcome.CANCELLED, end_s=1.0) for i in (1, 2, 3)]
    cancelled[2] = dataclasses.replace(cancelled[2], streamed=False)
    done = result([record(0), *cancelled], metrics=[metrics(3.0, vllm__num_requests_running=2)])
    words = zombie_requests(done, VerdictSpec())
    assert words is not None and words.summary.startswith("the engine still reported 2 requests running 2.0 s after")
    assert words.summary.endswith("(2 of loadrepro's requests had been cancelled mid-stream; 1 of loadrepro's "
                                  "requests had been cancelled while their whole answers were made)"), words.summary
    assert zombie_requests(result([record(0)], metrics=[metrics(3.0, vllm__num_requests_running=0)]),
                           VerdictSpec()) is None
