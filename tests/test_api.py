"""The Python API: its docstring examples run as written, errors are loadrepro's exceptions, the target's failures
are in the report, and the package stays quick to import."""

import doctest
import subprocess
import sys

import pytest

import loadrepro
import loadrepro.api
from loadrepro.errors import ProfileError, UsageError
from tests.helpers import cli


@pytest.mark.slow
def test_every_docstring_example_runs():
    results = doctest.testmod(loadrepro.api, verbose=False)
    assert results.attempted >= 6 and results.failed == 0


def test_bad_input_raises_loadrepros_errors(tmp_path):
    with pytest.raises(ProfileError):
        loadrepro.load_profile("quickstart", ["workload.conversations=0"])
    with pytest.raises(UsageError):
        loadrepro.run("quickstart", base_url="http://127.0.0.1:9", engine_cmd="x {port}", out=tmp_path)
    with pytest.raises(UsageError):
        loadrepro.ab("quickstart", stock_url="http://127.0.0.1:9", out=tmp_path)


def test_a_profile_object_takes_overrides_too(tmp_path):
    profile = loadrepro.load_profile("healthy", ["workload.conversations=2", "workload.turns=1"])
    report = loadrepro.run(profile, overrides=["workload.max_tokens=4"], out=tmp_path)
    assert report.passed and report.profile["workload"]["max_tokens"] == 4 and report.run_dir == str(tmp_path)
    assert "run_dir" not in (tmp_path / "report.json").read_text()


def test_importing_loadrepro_does_not_import_the_engine_driving_parts():
    code = "import sys, loadrepro; print(sorted(m for m in ('numpy', 'aiohttp', 'matplotlib', " \
           "'loadrepro.runs.session') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_api_sizes_a_workload_to_overrun_the_pool_as_the_command_line_does(tmp_path):
    said: list[str] = []
    report = loadrepro.run("draft-pool", size_to_overrun=1.5, say=said.append, out=tmp_path)
    assert not report.passed and any(line.startswith("size-to-overrun 1.5:") for line in said), said
    assert max(report.pressure.pool_usage_peak.values()) >= 0.99


def test_the_api_plans_in_a_local_tokenizers_tokens(tokenizer_dir, tmp_path):
    report = loadrepro.run("healthy", tokenizer=tokenizer_dir, overrides=["workload.conversations=2",
                                                                         "workload.turns=1"], out=tmp_path)
    assert report.calibration.source == f"local tokenizer {tokenizer_dir / 'tokenizer.json'}"


def test_bad_tokenizers_and_shrinks_are_usage_errors_before_anything_starts(tmp_path):
    with pytest.raises(UsageError, match="no tokenizer.json"):
        loadrepro.run("quickstart", tokenizer=tmp_path / "nothing", out=tmp_path / "run")
    with pytest.raises(UsageError, match="a failing run directory or a profile"):
        loadrepro.shrink_failure(out=tmp_path / "shrink")
    assert not (tmp_path / "run").exists() and not (tmp_path / "shrink").exists()


def test_the_command_line_and_the_api_refuse_bad_input_in_the_same_words(tmp_path):
    with pytest.raises(UsageError) as raised:
        loadrepro.ab("quickstart", stock_url="http://127.0.0.1:9", out=tmp_path)
    done = cli("ab", "--stock-url", "http://127.0.0.1:9")
    assert done.returncode == 2 and done.stderr.strip() == f"loadrepro: {raised.value}"
