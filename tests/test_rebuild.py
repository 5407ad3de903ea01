"""`loadrepro report RUN_DIR` rebuilds a run's reports from its directory: a soak killed with SIGKILL mid-load gets a
report marked incomplete (stop reason killed) holding every record that reached requests.jsonl; a run that ended is
rebuilt with the verdict and the counts it had, its [slo] judged as the run judged it, its records counted once; a
directory that is not a run's is refused by name."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import zipfile

import pytest

from loadrepro.records import Tally
from loadrepro.report.bundle import make_bundle
from loadrepro.runs.rebuild import rebuild
from tests.helpers import cli, rule


def _lines(path) -> int:
    """Complete JSON lines (a last line cut by the kill is not one)."""
    count = 0
    for line in path.read_text().splitlines():
        try:
            json.loads(line)
        except json.JSONDecodeError:
            continue
        count += 1
    return count


def test_a_soak_killed_mid_load_is_rebuilt_with_every_record_on_disk(tmp_path):
    run_dir = tmp_path / "soak"
    # The simulated engine in loadrepro's own process: the kill ends both, and nothing is left running.
    soak = subprocess.Popen([sys.executable, "-m", "loadrepro", "run", "--profile", "soak", "--set",
                             "load.duration_s=60", "--set", "load.rate=20", "--set", "workload.prefix_tokens=200",
                             "--set", "workload.turn_tokens=20", "--set", "workload.max_tokens=8", "--out",
                             str(run_dir)], env={**os.environ, "LOADREPRO_SIM_IN_PROCESS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # Its progress lines (stderr, every 5 s when not a terminal) are the event waited on: killed once one says
        # 60 requests are done. A soak that ends by itself first closes the pipe, and the test says so.
        assert soak.stderr is not None
        done = 0
        for line in soak.stderr:
            if (said := re.search(r" done (\d+)", line)) and (done := int(said.group(1))) >= 60:
                break
        assert done >= 60 and soak.poll() is None, "the soak ended before it could be killed"
        os.kill(soak.pid, signal.SIGKILL)
    finally:
        soak.kill()
        soak.wait(10)
    assert not (run_dir / "report.json").exists()  # killed before its first checkpoint (60 s)
    on_disk = _lines(run_dir / "requests.jsonl")
    done = cli("report", str(run_dir))
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads((run_dir / "report.json").read_text())
    assert report["stop_reason"] == "killed" and report["requests"]["total"] == on_disk >= 30, report["requests"]
    assert rule(report, "interrupted")["fired"] and "killed" in rule(report, "interrupted")["detail"]
    assert (run_dir / "report.md").exists() and (run_dir / "junit.xml").exists()
    # Its workload file was written before the load and not yet compressed: its bundle ships it gzipped, whole.
    assert (run_dir / "workload.jsonl").exists() and not (run_dir / "workload.jsonl.zst").exists()
    planned = (run_dir / "workload.jsonl").read_bytes()
    with zipfile.ZipFile(make_bundle(run_dir, tmp_path / "bundle.zip")) as bundle:
        shipped = next(n for n in bundle.namelist() if n.endswith("/workload.jsonl.gz"))
        assert gzip.decompress(bundle.read(shipped)) == planned


def test_a_run_that_ended_is_rebuilt_as_it_was_and_a_stranger_directory_refused(tmp_path, pictures):
    done = cli("run", "--profile", "healthy", "--set", "workload.conversations=4", "--out", str(tmp_path / "run"),
               "--quiet", env={"LOADREPRO_SIM_IN_PROCESS": "1"})
    assert done.returncode == 0, done.stderr
    before = json.loads((tmp_path / "run" / "report.json").read_text())
    assert (tmp_path / "run" / "report.html").exists() and not (tmp_path / "run" / "timeline.png").exists()
    again = cli("report", str(tmp_path / "run"), "--png")
    after = json.loads((tmp_path / "run" / "report.json").read_text())
    assert again.returncode == 0 and after["verdict"] == before["verdict"] == "pass", again.stdout
    assert after["stop_reason"] == "done" and after["requests"] == before["requests"]
    assert after["health"]["post"] == before["health"]["post"] == 200
    assert (tmp_path / "run" / "timeline.png").stat().st_size > 0
    (tmp_path / "other").mkdir()
    refused = cli("report", str(tmp_path / "other"))
    assert refused.returncode == 2 and "missing run.json" in refused.stderr, refused.stderr


def test_a_run_that_kept_some_of_its_records_and_samples_is_rebuilt_from_what_it_kept(tmp_path, monkeypatch):
    """A soak keeps in memory its first records (keep_records) and thins each kind of sample past MAX_SAMPLES; its
    report's request table, capacity outcomes, health and memory sections are drawn from what it kept. The rebuild
    keeps the same (here 3 records of 18, and 8 samples of a kind): every field of report.json comes out as the run
    wrote it, but the rebuild's own note and the run's timing, which only the run could measure."""
    monkeypatch.setattr("loadrepro.load.recorder.MAX_SAMPLES", 8)
    run_dir = tmp_path / "run"
    done = cli("run", "--profile", "healthy", "--set", "workload.conversations=6", "--set", "load.keep_records=3",
               "--set", "watch.health_interval_s=0.02", "--set", "watch.memory_interval_s=0.02", "--out", str(run_dir),
               "--quiet", env={"LOADREPRO_SIM_IN_PROCESS": "1"})
    before = json.loads((run_dir / "report.json").read_text())
    assert done.returncode == 0 and before["request_table_total"] == 18 and len(before["request_table"]) < 18, done
    polls = sum('"kind":"health"' in line for line in (run_dir / "samples.jsonl").read_text().splitlines())
    assert polls > 8, polls  # thinned in the run
    rebuild(run_dir)
    after = json.loads((run_dir / "report.json").read_text())
    assert {k for k in before if before[k] != after.get(k)} == {"notes", "timing"}, after


@pytest.mark.parametrize(("ttft_ms", "verdict", "severity"), [(0.001, "fail", "fail"), (600_000.0, "pass", "info")])
def test_a_rebuilt_report_judges_the_slo_as_the_run_did_counting_its_records_once(tmp_path, monkeypatch, ttft_ms,
                                                                                  verdict, severity):
    """Every request misses a first token in a microsecond (the run fails rule `slo`), and meets one in ten minutes
    (it passes): the rebuilt report says the same, from one count of the records."""
    run_dir = tmp_path / "run"
    done = cli("run", "--profile", "healthy", "--set", "workload.conversations=4", "--set", f"slo.ttft_ms={ttft_ms}",
               "--set", "slo.min_attainment=0.9", "--out", str(run_dir), "--quiet",
               env={"LOADREPRO_SIM_IN_PROCESS": "1"})
    before = json.loads((run_dir / "report.json").read_text())
    assert before["verdict"] == verdict and rule(before, "slo")["severity"] == severity, done.stdout
    original, counted = Tally.add, []

    def counting(tally, record):
        counted.append(record.id)
        return original(tally, record)

    monkeypatch.setattr(Tally, "add", counting)
    report, _ = rebuild(run_dir)
    after = json.loads((run_dir / "report.json").read_text())
    assert report.verdict == after["verdict"] == verdict and rule(after, "slo") == rule(before, "slo")
    assert after["requests"] == before["requests"] and len(counted) == len(set(counted)) == after["requests"]["total"]


def test_the_lines_before_a_fatal_line_are_read_from_the_log_that_line_is_in(tmp_path):
    """The engine's log in the run directory gives the lines before the first fatal match, as the run quoted them;
    a match whose line is not there (the run followed another log, from its end) gives none."""
    from loadrepro.records import LogMatch, RunFiles
    from loadrepro.runs.rebuild import _log_context

    (tmp_path / "engine.log").write_text("".join(f"line {i}\n" for i in range(1, 150)) + "FATAL here\nafter\n")
    matched = LogMatch(5, 150, "sig", "F", "FATAL here")
    files = RunFiles((), (), (), (LogMatch(1, 3, "t", "T", "line 3"), matched), (), (), ())
    assert _log_context(tmp_path, files) == tuple(f"line {i}" for i in range(50, 150))
    elsewhere = RunFiles((), (), (), (LogMatch(5, 2, "sig", "F", "FATAL here"),), (), (), ())
    assert _log_context(tmp_path, elsewhere) == ()
