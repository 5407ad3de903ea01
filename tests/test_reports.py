"""Reports rendered from a fixed RunResult: golden files, the JUnit shape, and the JSON schema round trip."""

import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path

from loadrepro.config.profile_files import load_profile
from loadrepro.judge.judgement import judge
from loadrepro.records import Outcome
from loadrepro.report.build import build_report
from loadrepro.report.html import Charts, render_html, rule_checks
from loadrepro.report.json import read_report, render_json
from loadrepro.report.junit import render_junit
from loadrepro.report.markdown import render_markdown
from loadrepro.report.write import write_reports
from loadrepro.schema.report_sections import Environment
from loadrepro.schema.run_report import RunReport
from loadrepro.workload.summary import WorkloadSummary
from tests.builders import health, log_match, metrics, record, result

GOLDEN = Path(__file__).parent / "golden"
FATAL = "Draft KV cache context resize failed for request 19: could not resize to 4225 tokens"


def fixed_report() -> RunReport:
    records = [record(i, end_s=0.5 + i * 0.1, conversation=i) for i in range(1, 4)]
    records += [record(4, Outcome.STREAM_ERROR, end_s=2.1, turn=2, conversation=1, detail=FATAL,
                       signature="trtllm-draft-resize-failed"),
                record(5, Outcome.REJECTED, end_s=2.2, turn=2, conversation=2, status=400,
                       detail="This model's maximum context length is 8192 tokens", signature="vllm-context-length")]
    run = result(records, health(200, 200, 503, 503), post=503,
                 metrics=[metrics(1.0, vllm__kv_cache_usage_perc=0.5, vllm__num_requests_waiting=2,
                                  vllm__num_preemptions_total=0)],
                 log_matches=[log_match(2.0, f"2026-11-30 06:00:02.000 ERROR [RANK 0] {FATAL}",
                                        "trtllm-draft-resize-failed", number=7)],
                 log_context=["2026-11-30 06:00:00.000 INFO engine up", "2026-11-30 06:00:01.000 INFO admitted 5"])
    profile = load_profile("quickstart")
    summary = WorkloadSummary("conversations", "chat", 7, "40.63.0", "simulated engine tokenizer (local)", 3, 0, 6,
                              4000, 4225, 4225, 24000, 8000, 600, 100000, ())
    return build_report(run, profile, judge(run, profile.verdict), summary, "loadrepro run --profile quickstart",
                        Environment(loadrepro_version="0.1.0", python="3.11.7", platform="Linux-x86_64"))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("LOADREPRO_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; rerun with LOADREPRO_UPDATE_GOLDEN=1 if intended"


def test_report_md_matches_its_golden_file():
    check_golden("report.md", render_markdown(fixed_report()))


def test_junit_xml_matches_its_golden_file_and_the_shape_ci_tools_read():
    text = render_junit(fixed_report())
    check_golden("junit.xml", text)
    root = ET.fromstring(text.encode())
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    for attribute in ("name", "tests", "failures", "errors", "skipped", "time", "timestamp"):
        assert attribute in suite.attrib
    cases = suite.findall("testcase")
    assert len(cases) == int(suite.get("tests")) and all(c.get("classname") and c.get("name") for c in cases)
    failures = [c for c in cases if c.find("failure") is not None]
    assert len(failures) == int(suite.get("failures")) == int(root.get("failures")) > 0
    assert all(f.find("failure").get("message") for f in failures)
    float(suite.get("time"))


def test_report_json_has_the_contract_fields_and_round_trips(tmp_path):
    report = fixed_report()
    written = write_reports(report, tmp_path)
    assert [p.name for p in written] == ["report.json", "report.md", "junit.xml"]
    again = read_report(tmp_path)
    assert again == report
    data = report.dump()
    for key in ("schema", "verdict", "reasons", "label", "profile", "seed", "target", "started_at", "duration_s",
                "requests", "health", "first_failure", "signatures", "rules", "latency", "throughput", "cache",
                "workload", "environment"):
        assert key in data
    assert data["schema"] == "loadrepro.report/1" and data["verdict"] == "fail"
    assert data["first_failure"]["outcome"] == "stream_error" and data["first_failure"]["t_s"] == 2.1
    assert [t["status"] for t in data["health"]["transitions"]] == [200, 503]
    assert data["signatures"][0]["class"] == "F"
    assert set(data["latency"]) >= {"ttft_ms", "itl_ms", "e2e_ms"}
    assert render_json(report).startswith("{")


def test_a_float_that_is_not_a_number_reads_back_as_written(tmp_path):
    """report.json writes NaN and Infinity as Python's json module does, where the serialiser would write null (which
    a float field refuses): a report with one reads back, as `compare` and `gate` read it."""
    report = fixed_report().model_copy(update={"duration_s": float("nan")})
    write_reports(report, tmp_path)
    assert '"duration_s": NaN' in (tmp_path / "report.json").read_text()
    assert math.isnan(read_report(tmp_path).duration_s)


def test_the_rules_table_holds_the_rules_that_fired_and_folds_what_the_others_look_for():
    """report.html's rules: those that fired with what each found; the others, folded, with what each looks for (a
    row of dashes each said nothing of what the run was checked for); the run's notes after them."""
    report = fixed_report().model_copy(update={"notes": ["metrics: /metrics answered HTTP 404"]})
    page = render_html(report, Charts("", ""))
    rules = page[page.index("<h2>Rules</h2>"):]
    rules = rules[:rules.index("<h2>", 4)]
    table, folded = rules.split("<details>")
    fired = [x for x in report.rules if x.fired]
    quiet = [x for x in report.rules if not x.fired]
    assert fired and quiet
    assert table.count("<tr>") == 1 + len(fired) and "<td>-</td>" not in table
    assert all(f"<td>{x.name}</td>" in table for x in fired)
    assert f"{len(quiet)} more rules checked, none of them fired" in folded
    looks = rule_checks()
    assert all(looks[x.name] for x in quiet)  # every rule says what it looks for
    assert folded.count("<tr>") == 1 + len(quiet) and all(f"<td>{x.name}</td>" in folded for x in quiet)
    assert "Any request whose outcome is stalled" in folded  # stalled_streams, in its own words
    assert "<h2>Notes</h2><ul><li>metrics: /metrics answered HTTP 404</li></ul>" in page


def test_counts_agree_with_their_nouns_in_the_report_and_on_the_terminal():
    """"1 requests sent": every count is put into words by one function (judge/findings.py counted)."""
    from loadrepro.cli.summary_lines import describe_verdict
    from loadrepro.judge.findings import counted
    from loadrepro.report.markdown import latency_rows

    assert (counted(1, "request"), counted(0, "request"), counted(1200, "request")) == \
        ("1 request", "0 requests", "1,200 requests")
    r = fixed_report()
    queue = r.latency.queue_ms.model_copy(update={"count": 1})
    one = r.model_copy(update={"latency": r.latency.model_copy(update={"queue_ms": queue}),
                               "requests": r.requests.model_copy(update={"total": 1})})
    rows = {name: over for name, _, over in latency_rows(one)}
    assert rows["queued in loadrepro ([load] concurrency)"] == "1 request sent", rows
    assert rows["time to first token"].endswith("requests with a token"), rows  # the fixed run's 4, plural
    assert "(1 request in " in describe_verdict(one)[0]


def test_report_md_lists_the_rules_that_fired_then_names_the_others_as_report_html_does():
    """report.md's rules: a row for each rule that fired, then one line naming the others (no row of dashes); a run
    in which none fired names them all."""
    report = fixed_report()
    rules = render_markdown(report).split("## Rules\n")[1]
    fired = [x.name for x in report.rules if x.fired]
    quiet = [x.name for x in report.rules if not x.fired]
    rows = [line for line in rules.splitlines() if line.startswith("| ") and not line.startswith("| rule |")]
    assert [row.split(" | ")[0][2:] for row in rows] == fired and "| - |" not in rules
    assert f"\n{len(quiet)} more rules checked, none of them fired: {', '.join(quiet)}.\n" in rules
    calm = report.model_copy(update={"rules": [x.model_copy(update={"fired": False}) for x in report.rules]})
    calm_rules = render_markdown(calm).split("## Rules\n")[1]
    assert "| rule |" not in calm_rules and f"All {len(report.rules)} rules checked, none of them fired: " in calm_rules
