"""Engine-log diagnosis on multi-rank fixtures built from the seeds' lines with ordinary INFO noise."""

import json
from pathlib import Path

import pytest

from loadrepro.errors import UsageError
from loadrepro.judge.diagnose import diagnose
from loadrepro.report.diagnosis import to_markdown
from tests.helpers import cli

FIXTURES = Path(__file__).parent / "fixtures"
RANK0, RANK3 = FIXTURES / "trtllm-rank0.log", FIXTURES / "trtllm-rank3.log"


@pytest.mark.parametrize("order", [(RANK0, RANK3), (RANK3, RANK0)])
def test_the_initiating_rank_is_0_and_rank_3s_hard_kill_is_collateral(order):
    d = diagnose(order)
    assert d.fatal
    assert d.initiating.process == "rank 0" and d.initiating.signature == "trtllm-draft-resize-failed"
    assert [o.process for o in d.collateral] == ["rank 3"]
    assert d.collateral[0].signature == "trtllm-hang-detected"


def test_the_100_line_excerpt_is_exactly_the_lines_before_the_first_fatal_one():
    d = diagnose([RANK3, RANK0])
    lines = RANK0.read_text().splitlines()
    fatal_index = next(i for i, line in enumerate(lines) if "Draft KV cache context resize failed" in line)
    assert d.initiating.line == fatal_index + 1
    assert d.context == lines[fatal_index - 100:fatal_index]


def test_logged_capacity_figures_are_extracted_and_used():
    d = diagnose([RANK0, RANK3])
    assert d.figures["bytes_per_token"] == 49_968 and d.figures["draft_bytes_per_token"] == 1_284
    assert d.figures["tokens_per_block"] == 64 and d.figures["max_batch_size"] == 12
    # 60.51 GiB split by 49,968 + 1,284 bytes per token: 1,267,699 tokens on each side
    assert "1,267,699 tokens in the primary pool" in d.capacity
    assert "102,991 tokens was temporary pressure" in d.capacity
    text = to_markdown(d)
    assert "admission" in d.next_step and "Initiating: **rank 0**" in text


def test_pressure_only_logs_exit_0_and_say_pressure():
    done = cli("diagnose", str(FIXTURES / "pressure-only.log"))
    assert done.returncode == 0
    assert "pressure, not failure" in done.stdout and "Pressure, not failure" in done.stdout


def test_cli_exit_codes_and_json(tmp_path):
    fatal = cli("diagnose", str(RANK0), str(RANK3), "--json")
    assert fatal.returncode == 1
    data = json.loads(fatal.stdout)
    assert data["fatal"] and data["initiating"]["process"] == "rank 0" and len(data["context"]) == 100
    missing = cli("diagnose", str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and "no such log" in missing.stderr
    no_log = cli("diagnose", str(tmp_path))
    assert no_log.returncode == 2


def test_unreadable_files_are_usage_errors(tmp_path):
    with pytest.raises(UsageError):
        diagnose([tmp_path])  # a directory is not a log


def test_a_managed_stock_run_report_has_a_diagnosis_section(tmp_path):
    done = cli("run", "--profile", "page-index", "--out",
                           str(tmp_path), "--quiet")
    assert done.returncode == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["diagnosis"]["fatal"] and report["diagnosis"]["initiating"]["process"] == "rank 0"
    assert report["diagnosis"]["collateral"] == []
    assert "loadrepro ab --profile" in report["diagnosis"]["verification"]
    assert "## Diagnosis" in (tmp_path / "report.md").read_text()


SPLIT_LINES = [
    # the shape the engine prints: target= before the bytes per token
    "Splitting KV cache max_gpu_total_bytes: total=60.51 GiB, target=59.38 GiB (49968 bytes/token), "
    "draft=1.53 GiB (1284 bytes/token)",
    # the same fields in another order, without spaces before the units
    "Splitting KV cache max_gpu_total_bytes: draft=1.53GiB (1284 bytes/token), total=60.51GiB, "
    "target=59.38GiB (49968 bytes/token)",
    # the older shape: the target's bytes per token after total=
    "Splitting KV cache max_gpu_total_bytes: total=60.51GiB (49968 bytes/token), draft=1.52GiB (1284 bytes/token)",
]


@pytest.mark.parametrize("split", SPLIT_LINES)
def test_the_kv_split_line_is_read_in_any_field_order(split, tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text(f"[11/30/2026-06:00:01] [TRT-LLM] [RANK 0] [I] {split}\n"
                   "[11/30/2026-06:00:02] [TRT-LLM] [RANK 0] [I] tokens_per_block=64 max_seq_len=131072 "
                   "max_batch_size=12\n"
                   "[11/30/2026-06:00:09] [TRT-LLM] [RANK 0] [E] Draft KV cache context resize failed for request 7: "
                   "could not resize to 2000000 tokens\n")
    d = diagnose([log])
    assert d.figures["bytes_per_token"] == 49_968 and d.figures["draft_bytes_per_token"] == 1_284
    assert d.figures["pool_bytes"] == pytest.approx(60.51 * 2**30, rel=1e-6)
    assert "1,267,699 tokens in the primary pool (49,968 B/token)" in d.capacity
    assert "1,267,699 in the draft pool (1,284 B/token)" in d.capacity
    assert "can never fit" in d.capacity  # 2,000,000 tokens > 1,267,699
