"""compare's table: rows that say something on at least one side."""

from loadrepro.compare.comparison import compare
from loadrepro.config.profile import VerdictSpec
from loadrepro.config.profile_files import load_profile
from loadrepro.judge.judgement import judge
from loadrepro.records import Outcome
from loadrepro.report.build import build_report
from loadrepro.schema.report_sections import Environment
from loadrepro.schema.run_report import RunReport
from loadrepro.workload.summary import WorkloadSummary
from tests.builders import health, record, result

SUMMARY = WorkloadSummary("conversations", "chat", 7, "40.63.0", "simulated engine tokenizer (local)", 2, 0, 4,
                          4000, 4225, 4225, 24000, 8000, 600, 100000, ())


def report(label: str, tokens: int, failing: bool) -> RunReport:
    records = [record(1, tokens=tokens), record(2, conversation=1, tokens=tokens)]
    if failing:
        records.append(record(3, Outcome.SERVER_ERROR, end_s=2.0, conversation=2, status=500, detail="boom"))
    run = result(records, health(200, 200, 200))
    profile = load_profile("quickstart")
    built = build_report(run, profile, judge(run, profile.verdict), SUMMARY, "loadrepro ab",
                         Environment(loadrepro_version="0.1.0", python="3.11.7", platform="Linux"))
    return built.model_copy(update={"label": label})


def test_a_row_with_no_value_on_either_side_is_left_out():
    short = compare(report("stock", 2, True), report("patched", 2, False), VerdictSpec())
    assert short.fix_confirmed
    tests = [row.test for row in short.rows]
    assert "their decode tokens/s (p50)" not in tests  # two-token answers have no decode rate on either side
    assert all(row.stock.strip("-/ ") or row.patched.strip("-/ ") for row in short.rows)
    long = compare(report("stock", 20, True), report("patched", 20, False), VerdictSpec())
    assert "their decode tokens/s (p50)" in [row.test for row in long.rows]


def test_a_long_cell_is_cut_at_a_word_and_given_whole_below_the_table():
    from loadrepro.compare.comparison import Comparison, Conclusion, Row
    from loadrepro.report.comparison_markdown import CELL_CHARS, render_comparison

    died = ("engine died at 0.2 s with `Draft KV cache context resize failed for request 13: could not resize to "
            "4402 tokens`; 12/12 requests ending after it failed; /health 503 from then on")
    text = render_comparison(Comparison(conclusion=Conclusion.FIX_CONFIRMED, detail="d", stock_label="stock",
                                        patched_label="patched", rows=[Row(test="engine died", stock=died,
                                                                           patched="no")]))
    row = next(line for line in text.splitlines() if line.startswith("| engine died |"))
    cell = row.split(" | ")[1]
    assert cell.endswith(" …") and len(cell) <= CELL_CHARS + 3
    assert died.startswith(cell[:-2].rstrip("`")) and died[len(cell[:-2].rstrip("`"))] == " "  # cut at a word
    assert cell.count("`") % 2 == 0  # the code span it cut is closed
    assert f"- engine died (stock): {died}" in text
