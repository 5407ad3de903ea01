"""The Python API: its docstring examples run as written, errors are loadrepro's exceptions, the target's failures
are in the report, and the package stays quick to import."""

import doctest
import subprocess
import sys

import pytest

import loadrepro
import loadrepro.api
from loadrepro.errors import ProfileError, UsageError


def test_every_docstring_example_runs():
    results = doctest.testmod(loadrepro.api, verbose=False)
    assert results.attempted >= 6 and results.failed == 0


def test_the_public_names_are_sorted_and_all_resolve():
    assert loadrepro.__all__ == sorted(loadrepro.__all__)
    for name in loadrepro.__all__:
        assert getattr(loadrepro, name) is not None


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
    code = "import sys, loadrepro; print(sorted(m for m in ('numpy', 'aiohttp', 'matplotlib', 'loadrepro.session') " \
           "if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
