"""The rules' findings word for word, at their thresholds and on both sides of them: what a CI job or a bug report
reads is the summary, so a summary that drifts is a regression."""

import dataclasses

import pytest

from loadrepro.config.capacity import Fit, Prediction
from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.admission import capacity_mismatch, prefix_reuse_missing, rejections, throttling
from loadrepro.judge.classify import (
    Severity,
    engine_death,
    failures_while_healthy,
    low_completion,
    pressure_in_metrics,
    protocol_errors,
    stalled_streams,
    truncated_streams,
)
from loadrepro.judge.measurements import measure
from loadrepro.judge.prompts import prompt_lengths, prompt_truncated
from loadrepro.load.recorder import Recorder
from loadrepro.records import Outcome
from loadrepro.records.vocabulary import LogMatch
from tests.builders import health, metrics, note, record, result, ruled

SPEC = VerdictSpec()
FATAL = "Failed to resume draft KV cache for request 53"


def with_predictions(run, *predictions: Prediction):
    return dataclasses.replace(run, predictions=tuple(predictions))


def lengths(id: int, planned: int, counted: int | None):
    return dataclasses.replace(record(id), expected_prompt_tokens=planned, prompt_tokens=counted)


# -- capacity_mismatch ----------------------------------------------------------------------------------------


def test_capacity_mismatch_names_the_first_unrejected_request_that_can_never_fit():
    run = result([record(1, conversation=1, turn=2, outcome=Outcome.SERVER_ERROR),
                  record(2, conversation=2, turn=2, outcome=Outcome.SERVER_ERROR),
                  record(3, conversation=3, turn=2, outcome=Outcome.REJECTED),
                  record(4, conversation=4, turn=2, outcome=Outcome.CANCELLED)])
    never = [Prediction(c, 2, Fit.NEVER_FITS, "max length", 9000) for c in (1, 2, 3, 4)]
    finding = capacity_mismatch(with_predictions(run, *never), SPEC)
    assert finding.severity is Severity.FAIL and finding.rule == "capacity_mismatch"
    assert finding.summary == ("2 requests that can never fit (max length) were not rejected at admission "
                               "(request 1, 9000 tokens: server_error)")


def test_capacity_mismatch_names_requests_that_fit_but_were_refused_and_joins_both():
    run = result([record(1, conversation=1, outcome=Outcome.REJECTED), record(2, conversation=2, outcome=Outcome.OK),
                  record(3, conversation=3, outcome=Outcome.OK)])
    predictions = (Prediction(1, 1, Fit.FITS, "", 100), Prediction(2, 1, Fit.MUST_WAIT, "pool", 5000),
                   Prediction(3, 1, Fit.NEVER_FITS, "pool", 7000))
    assert capacity_mismatch(with_predictions(run, *predictions), SPEC).summary == (
        "1 requests that can never fit (pool) were not rejected at admission (request 3, 7000 tokens: ok); "
        "1 requests that fit were rejected (request 1, 100 tokens)")


def test_capacity_mismatch_is_silent_when_admission_agrees_or_nothing_was_predicted():
    run = result([record(1, conversation=1, outcome=Outcome.REJECTED), record(2, conversation=2),
                  record(3, conversation=3, outcome=Outcome.REJECTED)])
    agreeing = (Prediction(1, 1, Fit.NEVER_FITS, "pool", 7000), Prediction(2, 1, Fit.FITS, "", 10),
                Prediction(3, 1, Fit.MUST_WAIT, "pool", 5000))
    assert capacity_mismatch(with_predictions(run, *agreeing), SPEC) is None
    assert capacity_mismatch(run, SPEC) is None
    other_turn = (Prediction(1, 2, Fit.FITS, "", 10),)  # predictions are matched by conversation and turn
    assert capacity_mismatch(with_predictions(run, *other_turn), SPEC) is None


# -- prefix_reuse_missing -------------------------------------------------------------------------------------


def test_prefix_reuse_counts_later_completed_turns_against_the_threshold_exactly():
    spec = VerdictSpec(min_cache_hit=0.5)
    run = result([record(1, turn=1, shared=100, cached=0),  # a first turn reuses nothing: not counted
                  record(2, turn=2, shared=100, cached=50),  # exactly at the threshold: enough
                  record(3, turn=2, shared=100, cached=49),
                  record(4, turn=2, shared=100, cached=None),  # reports none among ones that do: none found
                  record(5, turn=2, shared=0, cached=0),  # no shared prefix: not counted
                  record(6, turn=2, shared=100, cached=0, outcome=Outcome.SERVER_ERROR)])  # failed: not counted
    finding = prefix_reuse_missing(run, spec)
    assert finding.severity is Severity.FAIL
    assert finding.summary == ("2/3 later turns found less than 50% of their shared prefix in the cache "
                               "(request 3: 49 of 100 tokens)")


def test_prefix_reuse_without_cached_tokens_is_an_info_naming_the_flags():
    spec = VerdictSpec(min_cache_hit=0.5)
    silent = prefix_reuse_missing(result([record(2, turn=2, shared=100)]), spec)
    assert silent.severity is Severity.INFO and silent.summary == (
        "the target reports no cached tokens, so prefix reuse was not checked (vLLM: --enable-prompt-tokens-details; "
        "SGLang: --enable-cache-report)")
    assert prefix_reuse_missing(result([record(1, turn=1, shared=100, cached=0)]), spec) is None


# -- prompt_lengths -------------------------------------------------------------------------------------------


def test_prompt_errors_are_relative_to_the_plan_and_skip_what_was_not_counted():
    run = result([lengths(1, 1000, 1100), lengths(2, 1000, None), lengths(3, 0, 10), lengths(4, 800, 600)])
    errors = run.totals(60.0).prompt_errors
    assert errors.count == 2 and errors.total == pytest.approx(0.1 - 0.25)
    assert (errors.worst.request, errors.worst.error) == (4, pytest.approx(-0.25))
    assert (errors.beyond(0.1), errors.beyond(0.0999), errors.beyond(0.25)) == (1, 2, 0)


def test_prompt_lengths_warns_with_the_worst_request_beyond_the_threshold_only():
    spec = VerdictSpec(max_prompt_error=0.05)
    run = result([lengths(1, 1000, 1050), lengths(2, 1000, 1060), lengths(3, 2000, 2500), lengths(4, 1000, 1000)])
    finding = prompt_lengths(run, spec)
    assert finding.severity is Severity.INFO
    assert finding.summary == ("warning: 2/4 prompts were off their planned length by more than 5% (worst: request 3, "
                               "planned 2,000, the target counted 2,500, +25.0%): the workload that ran is not the "
                               "one asked for")
    assert prompt_lengths(result([lengths(1, 1000, 1050)]), spec) is None  # exactly 5%: within
    assert prompt_truncated(run, spec) is None  # longer than planned: nothing was cut


def test_prompt_truncated_names_how_many_by_how_much_and_tells_a_calibration_error_apart():
    spec = VerdictSpec(max_prompt_error=0.05)
    cut = [lengths(1, 1000, 1010), lengths(2, 1800, 1020), lengths(3, 2200, 1020), lengths(4, 1000, 990)]
    finding = prompt_truncated(dataclasses.replace(result(cut), context=(2048, "n_ctx per slot in /props")), spec)
    assert finding.severity is Severity.FAIL
    assert finding.summary == ("2/4 prompts were cut by the engine and answered as if whole: counted a median 43% "
                               "shorter than planned (request 3: planned 2,200 tokens, the engine counted 1,020); the "
                               "engine takes 2,048 tokens a request (n_ctx per slot in /props); the other 2 prompts' "
                               "lengths agree with the plan: not a calibration error")
    assert prompt_lengths(result(cut), spec) is None  # the cut prompts are this rule's alone
    assert prompt_truncated(result(cut), VerdictSpec(allow_truncated_prompts=True)).severity is Severity.INFO
    # a few prompts a little shorter than planned, the rest agreeing: calibration noise (probes), not cuts
    noisy = [lengths(1, 120, 103), lengths(2, 200, 184), *(lengths(i, 1000, 1000) for i in range(3, 40))]
    assert prompt_truncated(result(noisy), spec) is None
    # every prompt 30% shorter: a calibration error, unless the engine's log says it cut one
    shorter = [lengths(i, planned, round(planned * 0.7)) for i, planned in enumerate((1000, 1800, 2200, 1000))]
    assert prompt_truncated(result(shorter), spec) is None
    assert prompt_lengths(result(shorter), spec).summary.startswith("warning: 4/4")
    said = LogMatch(0, 1, "llamacpp-input-truncated", "P", "input truncated, n_ctx = 2048, n_prompt_tokens = 1020")
    logged = prompt_truncated(result(shorter, log_matches=[said]), spec)
    assert logged.summary.startswith("4/4 prompts were cut") and "`input truncated, n_ctx = 2048" in logged.summary


# -- count rules, completion, health --------------------------------------------------------------------------


@pytest.mark.parametrize(("rule", "outcome", "words"), [
    (stalled_streams, Outcome.STALLED, "streams stalled (no byte for stall_timeout_s)"),
    (truncated_streams, Outcome.TRUNCATED, "streams or connections cut before a finish"),
    (protocol_errors, Outcome.PROTOCOL_ERROR, "responses were not valid OpenAI JSON/SSE"),
])
def test_count_rules_name_the_earliest_hit(rule, outcome, words):
    run = result([record(1), record(7, outcome, end_s=3.25), record(4, outcome, end_s=2.5)])
    finding = rule(run, SPEC)
    assert finding.rule == rule.__name__ and finding.severity is Severity.FAIL
    assert finding.summary == f"2 {words} (first: request 4 at 2.5 s)"


def test_low_completion_exactly_at_the_threshold_passes_and_below_it_fails():
    spec = VerdictSpec(min_completed=0.5)
    half = [record(1), record(2, Outcome.SERVER_ERROR), record(3, Outcome.THROTTLED)]
    assert low_completion(result(half), spec) is None
    less = half + [record(4, Outcome.STALLED)]
    assert low_completion(result(less), spec).summary == "1/3 admitted requests completed (33%; at least 50% required)"
    assert low_completion(result([]), spec).summary == "no request completed"
    only_rejected = [record(1, Outcome.REJECTED), record(2, Outcome.REJECTED)]
    assert low_completion(result(only_rejected), spec) is None  # refused cleanly: the rejections rule judges it
    assert low_completion(result(only_rejected + [record(3, Outcome.THROTTLED)]), spec).summary == \
        "no request completed"


def test_engine_death_from_the_post_run_poll_alone_and_from_an_exit_note():
    at_end = result([record(1)], health(200, 200, 200), post=503)
    assert engine_death(at_end, SPEC).summary == "engine died at 5.0 s; /health 503 from then on"
    exited = result([record(1)], health(200, 200, 200), notes=[note(1.5, "engine", "the engine process exited with "
                                                                                 "code 1")], post=200)
    assert engine_death(exited, SPEC).summary == ("engine died at 1.5 s (the engine process exited with code 1); "
                                                  "/health answered 200 throughout")
    no_health = result([record(1)], (), notes=[note(1.5, "engine", "the engine process exited with code 1")], post=None)
    assert engine_death(no_health, SPEC).summary.endswith("; /health unknown from then on")


def test_engine_death_counts_the_requests_that_ended_after_it():
    records = [record(1, end_s=0.5), record(2, Outcome.SERVER_ERROR, end_s=2.5, detail=FATAL,
                                            signature="trtllm-draft-resume-failed"),
               record(3, end_s=3.0), record(4, Outcome.CANCELLED, end_s=3.5)]
    died = result(records, health(200, 200, 503, 503, 503), post=503)
    assert engine_death(died, SPEC).summary == (f"engine died at 2.0 s with `{FATAL}`; 1/2 requests ending after it "
                                                "failed; /health 503 from then on")


def test_failures_while_healthy_names_the_first_and_its_detail():
    run = result([record(1, Outcome.SERVER_ERROR, end_s=1.5, detail="boom   twice", status=500),
                  record(2, Outcome.SERVER_ERROR, end_s=2.5, detail="later", status=500)])
    assert failures_while_healthy(run, SPEC).summary == (
        "2 requests failed while /health answered 200 (first: request 1, server_error, `boom twice`)")


def test_rejections_and_throttling_summaries():
    long = "x" * 200
    run = result([record(1, Outcome.REJECTED, detail=long), record(2, Outcome.REJECTED, detail="second"),
                  record(3, Outcome.THROTTLED, retries=3), record(4, retries=2)])
    assert rejections(run, SPEC).summary == f"2 requests rejected at admission: `{'x' * 160}...`"
    assert rejections(run, VerdictSpec(allow_rejected=False)).severity is Severity.FAIL
    assert throttling(run, SPEC).summary == "1 requests throttled after retries; 5 retries"
    assert throttling(result([record(1, retries=1)]), SPEC).summary == "0 requests throttled after retries; 1 retries"
    assert throttling(result([record(1)]), SPEC) is None


def test_pressure_lists_what_the_metrics_showed_at_their_thresholds():
    samples = [metrics(0.5, vllm__num_preemptions_total=3, vllm__num_requests_waiting=0, vllm__kv_cache_usage_perc=0.2),
               metrics(1.0, vllm__num_preemptions_total=7, vllm__num_requests_waiting=2, vllm__kv_cache_usage_perc=0.9)]
    run = result([record(1)], metrics=samples)
    assert measure(run, SPEC).preemptions == 4
    assert ruled(pressure_in_metrics, run, SPEC).summary == (
        "pressure handled: 4 preemptions, up to 2 requests waiting, KV usage peaked at 90%")
    calm = [metrics(0.5, vllm__num_preemptions_total=3, vllm__num_requests_waiting=0, vllm__kv_cache_usage_perc=0.89)]
    assert ruled(pressure_in_metrics, result([record(1)], metrics=calm), SPEC) is None
    assert measure(result([record(1)]), SPEC).preemptions is None


def test_prefix_reuse_is_judged_over_every_request_even_those_not_kept_in_memory():
    import dataclasses

    from loadrepro.records import Tally

    records = [record(i, turn=2, shared=1000, cached=900) for i in range(1, 41)]
    records[35] = record(36, turn=2, shared=1000, cached=799)  # late in a long run: not among the kept records
    full = result(records)
    tally = dataclasses.replace(Tally.of(records, full.start_ns, 60.0), dropped=30)
    kept_few = dataclasses.replace(result(records[:10]), tally=tally)
    finding = prefix_reuse_missing(kept_few, VerdictSpec(min_cache_hit=0.8))
    assert finding.summary == ("1/40 later turns found less than 80% of their shared prefix in the cache "
                               "(request 36: 799 of 1000 tokens)")
    assert prefix_reuse_missing(kept_few, VerdictSpec(min_cache_hit=0.799)) is None  # 799/1000 is 0.799: enough


# -- no_recovery's parts, word for word -----------------------------------------------------------------------


def test_a_recoverys_words_say_each_part_judged_or_why_not():
    from tests.test_recovery_judge import judged

    unjudged_tail = ("running requests not judged: the engine publishes no running count; KV not judged: no quiet "
                     "moment before it (nothing running or waiting) with the KV usage published")
    assert judged([Outcome.OK] * 3).detail == (
        "back 0.0 s after SIGCONT: SIGSTOP ...; /health 200 after 0.0 s; TTFT not judged: 3 requests were sent after "
        f"it, fewer than 8 (the load ended); {unjudged_tail}")
    assert judged([Outcome.TIMEOUT] * 10).detail == (
        "not back before the run ended, 2.0 s after it: SIGSTOP ...; /health 200 after 0.0 s; TTFT p95 never back "
        f"within 200 ms (it was 100 ms before); {unjudged_tail}")


def test_capacity_is_counted_over_every_request_of_a_soak_not_its_kept_records():
    # A soak keeps its first records only: a request that can never fit, served hours in, is past them.
    predictions = (Prediction(1, 1, Fit.FITS, "", 100), Prediction(2, 1, Fit.NEVER_FITS, "max length", 9000))
    recorder = Recorder(None, keep=3, predictions=predictions)
    served = [record(i, conversation=1) for i in range(1, 5)] + [record(5, conversation=2)]
    for r in served:
        recorder.record(r)
    run = dataclasses.replace(result(recorder.records), tally=recorder.tally, predictions=predictions)
    assert [r.id for r in run.records] == [1, 2, 3]
    assert capacity_mismatch(run, SPEC).summary == (
        "1 requests that can never fit (max length) were not rejected at admission (request 5, 9000 tokens: ok)")
    assert recorder.tally.capacity.outcomes == {"fits": {"ok": 4}, "never_fits": {"ok": 1}}
