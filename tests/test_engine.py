"""Managed engines: started on a free port with their log kept, stopped afterwards, never left behind."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loadrepro.config.defaults import SIM_IN_PROCESS_ENV
from loadrepro.errors import TargetError, UsageError
from loadrepro.load.engine import ManagedEngine, split_command
from tests.helpers import Done, cli, report, until

PY = sys.executable


def loadrepro(*args: str) -> Done:
    return cli(*args, "--quiet")


def processes_with(text: str) -> list[str]:
    """Each running process's whole command line holding `text` (-ww: ps cuts lines to the terminal's width
    otherwise, and under pytest a port at the end of a long line is cut off)."""
    listing = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in listing if text in line and "ps -eo" not in line]


def port_of(run_dir: Path) -> str:
    return json.loads((run_dir / "report.json").read_text())["target"]["base_url"].rsplit(":", 1)[1]


def test_a_managed_simulated_engine_end_to_end(tmp_path):
    command = f"{PY} -m loadrepro sim --scenario draft-pool --policy stock --port {{port}}"
    done = loadrepro("run", "--profile", "draft-pool", "--engine-cmd", command, "--out", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    log = (tmp_path / "engine.log").read_text()
    assert "Draft KV cache context resize failed for request" in log
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["target"]["engine_cmd"].startswith(PY) and "{port}" not in report["target"]["engine_cmd"]
    names = [s["name"] for s in report["signatures"]]
    assert "trtllm-draft-resize-failed" in names or "trtllm-draft-resume-failed" in names
    fatal_line = next(line for line in log.splitlines() if "Draft KV cache" in line)
    assert fatal_line.split("] ", 1)[1] == report["first_failure"]["detail"]  # the log and the first failure agree
    rule = next(r for r in report["rules"] if r["name"] == "fatal_signature")
    number = log.splitlines().index(fatal_line) + 1
    assert f"engine log line {number}" in rule["detail"]
    assert "engine: stopped by SIGTERM" in done.stderr
    assert not processes_with(f"--port {port_of(tmp_path)}")


def test_an_engine_that_exits_at_once_is_reported_with_its_log_tail(tmp_path):
    command = f"{PY} -c \"import sys; print('no accelerator found'); sys.exit(3)\""
    done = loadrepro("run", "--engine-cmd", command, "--out", str(tmp_path))
    assert done.returncode == 3
    assert "exited with code 3 before it was healthy" in done.stderr and "no accelerator found" in done.stderr


@pytest.mark.slow
def test_ab_starts_a_fresh_engine_for_each_side(tmp_path):
    base = f"{PY} -m loadrepro sim --scenario page-index --port {{port}}"
    done = loadrepro("ab", "--profile", "page-index", "--stock-cmd", base + " --policy stock",
                     "--patched-cmd", base + " --policy patched", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert port_of(tmp_path / "stock") != port_of(tmp_path / "patched")
    assert "fix confirmed" in (tmp_path / "compare.md").read_text()


def test_sigint_mid_run_leaves_no_engine_process(tmp_path):
    out = tmp_path / "run"
    command = f"{PY} -m loadrepro sim --scenario healthy --step-s 0.05 --port {{port}}"
    process = subprocess.Popen([PY, "-m", "loadrepro", "run", "--profile", "healthy", "--engine-cmd", command,
                                "--set", "workload.max_tokens=400", "--out", str(out), "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # mid-run: a record is written, so the engine ran and answered (a run that ended before starting its engine
        # would leave none running however it handled SIGINT)
        written = out / "requests.jsonl"
        until(lambda: process.poll() is not None or written.exists() and written.stat().st_size, 60, "a record")
        assert process.poll() is None, "the run ended before it got under way"
        engine = [line for line in processes_with("--scenario healthy --step-s 0.05 --port ") if "{port}" not in line]
        assert engine, "its engine should be running before the SIGINT"
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert not processes_with(f"--port {port_of(out)}")


def test_stop_escalates_to_sigkill_for_an_engine_that_ignores_sigterm(tmp_path):
    engine = ManagedEngine(f"sh -c 'trap \"\" TERM; exec {PY} -m http.server {{port}} --bind {{host}}'",
                           tmp_path / "engine.log", health_path="/")
    engine.start(30)
    assert engine.stop(grace_s=1.0).how == "killed by SIGKILL after the grace period"
    polite = ManagedEngine(f"{PY} -m http.server {{port}} --bind {{host}}", tmp_path / "e2.log", health_path="/")
    polite.start(30)
    assert polite.stop().how == "stopped by SIGTERM"
    assert not processes_with(f"http.server {engine.port}") and not processes_with(f"http.server {polite.port}")


def test_command_splitting_and_bad_commands(tmp_path):
    assert split_command("HF_HUB_OFFLINE=1 A=b vllm serve --port {port}") == (
        {"HF_HUB_OFFLINE": "1", "A": "b"}, ["vllm", "serve", "--port", "{port}"])
    with pytest.raises(UsageError):
        split_command("A=1")
    with pytest.raises(TargetError, match="cannot start the engine"):
        ManagedEngine("/nonexistent/engine --port {port}", tmp_path / "e.log").start(5)


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting to be reaped is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_an_engine_loadrepro_started_ends_when_loadrepro_is_killed(tmp_path):
    """SIGKILL leaves loadrepro no moment to stop its engine: the engine was started asking Linux for SIGTERM when
    loadrepro dies, and ends by itself."""
    process = subprocess.Popen([PY, "-m", "loadrepro", "run", "--profile", "soak", "--set", "load.duration_s=60",
                                "--out", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, SIM_IN_PROCESS_ENV: "0"})  # the engine as a process of its own
    try:
        pid = None
        while pid is None:
            line = process.stderr.readline()
            assert line, "loadrepro ended before its engine started"
            found = re.search(r"\(pid (\d+)\)", line)
            pid = int(found.group(1)) if found else None
        assert _running(pid)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        until(lambda: not _running(pid), 30, f"the engine (pid {pid}) ending with loadrepro")
    finally:
        if process.poll() is None:
            process.kill()


def _listening(url: str) -> bool:
    import socket

    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) == 0


def test_the_simulated_engine_served_in_process_is_judged_as_the_process_is_and_stopped_after(tmp_path, monkeypatch):
    """SIM_IN_PROCESS_ENV: the engine on a thread of loadrepro's process, its log and its command as the process's
    would be."""
    monkeypatch.setenv(SIM_IN_PROCESS_ENV, "1")
    done = cli("run", "--profile", "draft-pool", "--quiet", "--out", str(tmp_path / "thread"))
    assert done.returncode == 1, done.stderr
    data = report(tmp_path / "thread")
    assert "on a thread of this process" in done.stderr and "engine: stopped (its thread ended)" in done.stderr
    assert data["target"]["engine_cmd"].startswith("loadrepro sim --scenario draft-pool --policy stock")
    assert data["target"]["engine_cmd"].endswith(f"--port {port_of(tmp_path / 'thread')}")
    assert data["signatures"][0]["name"].startswith("trtllm-draft-")
    assert "Draft KV cache context resize failed" in (tmp_path / "thread" / "engine.log").read_text()
    assert not _listening(data["target"]["base_url"])  # stopped with the run


def test_a_fault_that_stops_the_engine_starts_the_simulated_engine_as_a_process(tmp_path, monkeypatch):
    monkeypatch.setenv(SIM_IN_PROCESS_ENV, "1")
    killed = cli("run", "--profile", "healthy", "--quiet", "--set", "workload.conversations=2", "--set",
                 "workload.prefix_tokens=300", "--set", "load.duration_s=3", "--set",
                 'chaos.events=[{at_s=1.0, action="kill", duration_s=0.5}]', "--out", str(tmp_path / "kill"))
    # a thread cannot be killed: the engine this fault stops is a process, said with its pid
    assert "(pid " in killed.stderr and "on a thread" not in killed.stderr, killed.stderr
    assert report(tmp_path / "kill")["chaos"][0]["action"] == "kill"


def test_an_engine_whose_port_another_process_took_first_starts_again_on_another(tmp_path):
    """Between choosing a free port and the engine's own bind, another program may take the port (a local Ray, or
    another engine): a binary protocol answering on it is not the engine, and the engine, unable to listen, is
    started again on a fresh port, the log saying why."""
    import socket
    import threading

    engine = ManagedEngine(f"{PY} -m http.server {{port}} --bind {{host}}", tmp_path / "engine.log", health_path="/")
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", engine.port))
    squatter.listen()
    taken = engine.port

    def answer_garbage() -> None:  # what a gRPC server on that port says to an HTTP request
        while True:
            try:
                conn, _ = squatter.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00\x00\x03\x7f\xff\xff\xff")

    threading.Thread(target=answer_garbage, daemon=True).start()
    try:
        url = engine.start(30)
    finally:
        squatter.close()
    try:
        assert engine.port != taken and url.endswith(f":{engine.port}") and engine.starts == 2
        assert f"port {taken} was taken by another process" in (tmp_path / "engine.log").read_text()
    finally:
        engine.stop()


def test_an_engine_whose_log_says_its_port_was_taken_is_started_again_on_another(tmp_path):
    """The process that took the port may have let it go before it is checked: the engine's own words (uvicorn's
    bind error) count as a taken port, not as an engine that exited before it was healthy."""
    script = tmp_path / "refused.py"
    script.write_text("import sys\nprint(f\"ERROR:    [Errno 98] error while attempting to bind on address "
                      "('127.0.0.1', {sys.argv[1]}): address already in use\")\nsys.exit(1)\n")
    engine = ManagedEngine(f"{PY} {script} {{port}}", tmp_path / "engine.log", health_path="/")
    with pytest.raises(TargetError, match="another process took each of the 3 ports"):
        engine.start(30)
    assert engine.starts == 3
