"""A signature a failed request carried is a failure in the diagnosis, as in the verdict, in `loadrepro diagnose`
and report.md alike, with one count; a clean refusal by design stays pressure, not failure. The engine is
tests/kv_pool_server.py, an llama-server-shaped engine loadrepro starts, its log in llama.cpp's words."""

import json
import socket
import subprocess
import sys

import pytest

from loadrepro.judge.diagnose import diagnose, log_digest, normalised
from tests.helpers import cli, until

SIGNATURE = "llamacpp-context-exceeded"
WARNING = "llamacpp-no-kv-slot"


def _run(tmp_path, *flags: str) -> tuple[int, dict]:
    """The healthy profile's 12 requests against the engine: its follow-up turns (2,258 tokens) do not fit a pool
    of 2,200 tokens, its first turns do."""
    engine = f"{sys.executable} -m tests.kv_pool_server --host 127.0.0.1 --port {{port}} --pool 2200 {' '.join(flags)}"
    done = cli("run", "--profile", "healthy", "--engine-cmd", engine, "--out", str(tmp_path / "run"), "--quiet")
    return done.returncode, json.loads((tmp_path / "run" / "report.json").read_text())


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("failed")
    code, report = _run(tmp_path)
    return code, report, tmp_path / "run"


def test_requests_failed_with_a_pressure_text_are_a_failure_in_the_report(failed_run):
    code, report, _ = failed_run
    assert code == 1 and report["verdict"] == "fail"
    failed = report["requests"]["by_outcome"]["server_error"]
    d = report["diagnosis"]
    assert d["failed"] and not d["pressure_only"] and not d["fatal"]
    assert d["failed_requests"] == {SIGNATURE: failed} and d["engine"] == "llama.cpp"
    assert "--kv-unified" in d["next_step"] and "-c/--ctx-size" in d["next_step"]
    assert "raise the KV memory fraction" not in d["next_step"]
    markdown = (failed_run[2] / "report.md").read_text()
    assert "pressure, not failure" not in markdown.lower()


def test_diagnose_on_the_failed_run_exits_1_and_counts_as_the_report_does(failed_run):
    _, report, run_dir = failed_run
    done = cli("diagnose", str(run_dir), "--json")
    assert done.returncode == 1, done.stdout
    d = json.loads(done.stdout)
    assert d["failed"] and not d["pressure_only"] and d["engine"] == "llama.cpp"
    rows = {s["name"]: s for s in report["signatures"]}
    for name in (SIGNATURE, WARNING):
        assert rows[name]["requests"] == d["requests"].get(name, 0)
        assert rows[name]["failed_requests"] == d["failed_requests"].get(name, 0)
        assert rows[name]["log_lines"] == d["counts"][name]
    failed = report["requests"]["by_outcome"]["server_error"]
    assert rows[SIGNATURE]["requests"] == rows[SIGNATURE]["failed_requests"] == failed
    assert rows[SIGNATURE]["log_lines"] == failed  # one `Context size has been exceeded.` line per failed request
    assert rows[WARNING]["log_lines"] == 3 * failed and rows[WARNING]["requests"] == 0


def test_the_metrics_note_is_said_once(failed_run):
    _, report, _ = failed_run
    metrics = [n for n in report["notes"] if n.startswith("metrics:")]
    assert len(metrics) == 1, report["notes"]


def test_clean_refusals_by_design_are_pressure_not_failure(tmp_path):
    code, report = _run(tmp_path, "--refuses")
    assert code == 0 and report["verdict"] == "pass"
    assert report["requests"]["by_outcome"]["rejected"] == 4
    d = report["diagnosis"]
    assert not d["failed"] and d["failed_requests"] == {} and d["requests"] == {"llamacpp-exceeds-context": 4}
    assert d["engine"] == "llama.cpp"
    done = cli("diagnose", str(tmp_path / "run"))
    assert done.returncode == 0, done.stdout
    assert "pressure, not failure" in done.stdout


def test_a_failed_run_with_no_signature_is_not_diagnosed_as_fine(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("main: server is listening on http://127.0.0.1:8080\n")
    d = diagnose([log], run_reasons=["3 wrong answers"])
    assert d.failed and "3 wrong answers" in d.next_step
    assert not diagnose([log]).failed


def test_a_signature_on_a_request_that_ended_well_or_was_refused_is_no_failure(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("decode: failed to find a memory slot for batch of size 512\n")
    d = diagnose([log], ended=[(SIGNATURE, "rejected"), (None, "ok"), (SIGNATURE, "stream_error")])
    assert d.requests == {SIGNATURE: 2} and d.failed_requests == {SIGNATURE: 1} and d.failed
    calm = diagnose([log], ended=[("llamacpp-exceeds-context", "rejected")])
    assert not calm.failed and calm.pressure_only


def test_the_log_digest_counts_each_warning_whatever_its_numbers(tmp_path):
    log = tmp_path / "engine.log"
    lines = [f"decode: failed to find a memory slot for batch of size {n}" for n in (512, 256, 128)] * 60
    lines += ["slot launch_slot_: id  0 | task 7 | processing task", "W load: 0x7f3a tensor skipped",
              "main: server is listening on http://127.0.0.1:8080"]
    log.write_text("\n".join(lines) + "\n")
    digest = log_digest(log, tail=2, top=5)
    assert digest.repeated[0] == ("decode: failed to find a memory slot for batch of size N", 180)
    assert digest.tail == lines[-2:] and digest.lines == len(lines)
    assert ("slot launch_slot_: id  N | task N | processing task", 1) not in digest.repeated  # not a warning
    assert normalised("took 1.5 ms at 0x7f3a") == "took N ms at N"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_a_run_against_a_url_is_diagnosed_from_its_requests_alone(tmp_path, failed_run):
    """A run with --base-url keeps no engine log; its requests carry the engine's error texts: the same counts
    and exit as the run that kept one."""
    port = _free_port()
    engine = subprocess.Popen([sys.executable, "-m", "tests.kv_pool_server", "--port", str(port), "--pool", "2200"],
                              stderr=subprocess.DEVNULL)
    try:
        until(lambda: _answers(port), what="the engine to listen")
        cli("run", "--profile", "healthy", "--base-url", f"http://127.0.0.1:{port}", "--out", str(tmp_path / "run"),
            "--quiet")
    finally:
        engine.terminate()
        engine.wait(10)
    assert not (tmp_path / "run" / "engine.log").exists()
    done = cli("diagnose", str(tmp_path / "run"), "--json")
    assert done.returncode == 1, done.stderr
    d = json.loads(done.stdout)
    with_log = json.loads(cli("diagnose", str(failed_run[2]), "--json").stdout)
    assert d["files"] == [] and d["counts"] == {} and f"--base-url http://127.0.0.1:{port}" in d["no_log"]
    assert d["failed"] and d["engine"] == "llama.cpp"
    assert d["failed_requests"] == with_log["failed_requests"] == {SIGNATURE: 4}
    assert d["requests"] == with_log["requests"]
    text = cli("diagnose", str(tmp_path / "run"))
    assert text.returncode == 1 and "No engine log read" in text.stdout and "--kv-unified" in text.stdout


def test_a_directory_with_neither_log_nor_requests_is_unreadable(tmp_path):
    done = cli("diagnose", str(tmp_path))
    assert done.returncode == 2 and "neither engine.log nor requests.jsonl" in done.stderr
