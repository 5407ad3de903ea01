"""Exit codes mean what the README says, for every command: 0 pass, 1 the target failed, 2 usage, 3 loadrepro's own
failure, 130 interrupted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadrepro.cli import commands as cli
from loadrepro.config import profile_files
from tests.helpers import spawn

ROOT = Path(__file__).resolve().parents[1]


def loadrepro(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return spawn(*args, timeout=timeout, cwd=ROOT)  # the entry point as a process: its exit code is what is tested


def test_help_is_0_and_a_bad_flag_is_2():
    assert loadrepro("--help").returncode == 0
    bad = loadrepro("run", "--no-such-flag")
    assert bad.returncode == 2 and "No such option" in bad.stderr


def test_compare_of_missing_reports_is_a_usage_error_not_a_failed_fix(tmp_path):
    done = loadrepro("compare", "/nonexistent/a", "/nonexistent/b")
    assert done.returncode == 2 and "cannot read a report at /nonexistent/a: No such file" in done.stderr
    (tmp_path / "report.json").write_text(json.dumps({"schema": "something else"}))
    other = loadrepro("compare", str(tmp_path), str(tmp_path))
    assert other.returncode == 2 and "is not a loadrepro report" in other.stderr


def test_an_unexpected_exception_is_3_with_one_line_and_the_traceback_kept(monkeypatch, capsys):
    def broken() -> list[str]:
        raise RuntimeError("a bug in loadrepro")

    monkeypatch.setattr(profile_files, "builtin_profiles", broken)  # the command imports it when it runs
    monkeypatch.setattr(sys, "argv", ["loadrepro", "profiles"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error (RuntimeError: a bug in loadrepro)" in err
    trace = Path(err.rsplit("the traceback is in ", 1)[1])
    assert "raise RuntimeError" in trace.read_text()
    trace.unlink()


def test_a_failing_watcher_is_a_note_and_the_run_goes_on(tmp_path):
    """An engine_log that is a directory makes the log watcher fail; the load and its report go on (exit 0)."""
    done = loadrepro("run", "--profile", "healthy", "--out", str(tmp_path / "run"), "--quiet",
                     "--set", f"watch.engine_log={tmp_path}", "--set", "workload.conversations=2")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["verdict"] == "pass"
    assert any(n.startswith("engine log: the engine log watcher stopped") and "IsADirectoryError" in n
               for n in report["notes"]), report["notes"]


def test_a_target_that_fails_is_1_and_a_profile_error_is_2(tmp_path):
    failed = loadrepro("run", "--profile", "quickstart", "--out", str(tmp_path / "stock"), "--quiet")
    assert failed.returncode == 1 and "verdict: FAIL" in failed.stdout
    typo = loadrepro("run", "--set", "load.concurency=3")
    assert typo.returncode == 2 and "concurency" in typo.stderr


def test_an_unexpected_exception_in_a_run_keeps_its_traceback_in_the_run_directory(monkeypatch, tmp_path):
    import asyncio

    from loadrepro.config.profile_files import load_profile
    from loadrepro.errors import InternalError
    from loadrepro.runs import session
    from loadrepro.runs.run_options import RunOptions

    async def broken(*args, **kwargs):
        raise RuntimeError("a bug while planning")

    monkeypatch.setattr(session, "plan_on_target", broken)
    options = RunOptions(load_profile("healthy"), None, None, "run", tmp_path, quiet=True)
    with pytest.raises(InternalError, match="a bug while planning") as raised:
        asyncio.run(session.run_session(options, say=lambda text: None))
    assert raised.value.exit_code == 3
    assert "RuntimeError: a bug while planning" in (tmp_path / "traceback.txt").read_text()


@pytest.mark.parametrize(("args", "code"), [(["profiles"], 0), (["capacity", "--bytes-per-token", "2048",
                                                                  "--pool-bytes", "4MiB", "--max-seq-len", "8192"], 0)])
def test_a_reader_that_went_away_does_not_change_the_exit_code(args, code):
    """`loadrepro ... | head`: stdout is closed before loadrepro writes; the code is still the command's own."""
    process = subprocess.Popen([sys.executable, "-m", "loadrepro", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err.decode()
    assert b"Traceback" not in err and b"internal error" not in err


@pytest.mark.parametrize(("profile", "code"), [("healthy", 0), ("quickstart", 1)])
def test_a_run_whose_readers_went_away_writes_its_files_and_exits_with_its_verdict(tmp_path, profile, code):
    """`loadrepro run ... 2>&1 | head`: stdout and stderr are closed before the run writes its first line; the run
    goes on, writes its reports and exits with its verdict's code, not an internal error's."""
    process = subprocess.Popen([sys.executable, "-m", "loadrepro", "run", "--profile", profile, "--out",
                                str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()
    process.stderr.close()
    assert process.wait(timeout=120) == code
    assert (tmp_path / "run" / "report.json").exists() and not (tmp_path / "run" / "traceback.txt").exists()
