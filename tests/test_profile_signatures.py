"""A profile's signatures behave exactly like built-in ones: records keep the class, rules and reports read it."""

from loadrepro.config.profile_files import load_profile
from loadrepro.judge.classify import fatal_signature
from loadrepro.judge.judgement import judge
from loadrepro.judge.signatures import compile_catalog
from loadrepro.load.outcomes import outcome_for_stream_error
from loadrepro.records import Outcome
from loadrepro.report.build import build_report
from loadrepro.workload.summary import WorkloadSummary
from tests.builders import record, result


def summary() -> WorkloadSummary:
    return WorkloadSummary("conversations", "chat", 7, "40.63.0", "test", 1, 0, 2, 10, 10, 10, 20, 0, 8, 100, ())


def test_a_profile_signature_of_class_t_stays_t_in_rules_and_report():
    profile = load_profile("quickstart")
    run = result([record(1), record(2, Outcome.STREAM_ERROR, detail="pool is full, retract", signature="my-pressure",
                                    signature_class="T")])
    judgement = judge(run, profile.verdict)
    assert dict(judgement.findings)["fatal_signature"] is None
    report = build_report(run, profile, judgement, summary(), "loadrepro run")
    assert [(s.name, s.class_) for s in report.signatures] == [("my-pressure", "T")]


def test_a_profile_signature_of_class_f_in_a_response_fires_fatal_signature():
    run = result([record(1), record(2, Outcome.SERVER_ERROR, detail="CUDA out of memory", signature="my-oom",
                                    signature_class="F")])
    finding = fatal_signature(run, load_profile("quickstart").verdict)
    assert finding is not None and "1 responses" in finding.summary and "CUDA out of memory" in finding.summary


def test_throttling_is_a_property_of_a_signature_not_of_its_name():
    catalog = compile_catalog([("slow-down-please", "come back later", "T", True), ("full", "pool is full", "T")])
    assert outcome_for_stream_error("come back later", None, catalog) is Outcome.THROTTLED
    assert outcome_for_stream_error("pool is full", None, catalog) is Outcome.STREAM_ERROR
    assert outcome_for_stream_error("The engine is currently busy", None, catalog) is Outcome.THROTTLED
