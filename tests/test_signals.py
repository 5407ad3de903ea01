"""Ctrl-C or SIGTERM at any phase of `run` or `ab` ends within 2 s, stops every engine loadrepro started, leaves
no process behind, writes what it has, and exits 130."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from loadrepro.load.runner import GRACE_S
from tests.helpers import until

ROOT = Path(__file__).resolve().parents[1]
SIM = shlex.join([sys.executable, "-m", "loadrepro", "sim", "--scenario", "draft-pool", "--port", "{port}"])


def never_healthy() -> tuple[str, str]:
    """An engine command that starts and never answers /health, with a marker to find its process by."""
    marker = f"loadrepro-test-{uuid.uuid4().hex}"
    return shlex.join([sys.executable, "-c", "import time; time.sleep(300)", marker]), marker


def alive(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


def engine_started(marker: str) -> bool:
    """The never-healthy engine itself runs (loadrepro's own command line names the marker too)."""
    return alive(rf"^\S+ -c import time; time.sleep\(300\) {marker}")


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "loadrepro", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(process: subprocess.Popen, text: str, timeout_s: float = 120) -> None:
    """Reads stderr until a line with `text`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if text in line:
            return
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"never saw {text!r}")


def interrupt(process: subprocess.Popen, signum: int) -> float:
    """Sends the signal; the seconds until the process exited."""
    sent = time.monotonic()
    process.send_signal(signum)
    try:
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
    return time.monotonic() - sent


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_ctrl_c_while_an_engine_starts_stops_it_and_exits_130(tmp_path):
    command, marker = never_healthy()
    process = start("run", "--engine-cmd", command, "--out", str(tmp_path), "--quiet")
    until(lambda: engine_started(marker))  # the engine was started, and loadrepro waits for its /health
    took = interrupt(process, signal.SIGINT)
    assert process.returncode == 130 and took < 2.0, (process.returncode, took, process.stderr.read()[-1000:])
    assert not alive(marker)


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_sigterm_during_the_load_writes_the_report_stops_the_engine_and_exits_130(tmp_path):
    healthy = SIM.replace("draft-pool", "healthy")  # a load that lasts until the signal
    process = start("run", "--engine-cmd", healthy, "--out", str(tmp_path), "--quiet",
                    "--set", "workload.turns=6", "--set", "workload.max_tokens=4000")
    wait_for(process, "target: the engine at")
    requests = tmp_path / "requests.jsonl"
    until(lambda: requests.exists() and requests.read_text().count("\n") >= 1)  # warm-ups done: follow-ups in flight
    took = interrupt(process, signal.SIGTERM)
    # At once, not after the 10 s grace in-flight requests get at a planned stop: the reports (pictures included)
    # and the engine's stop take 2-4 s on a busy 2-core machine.
    assert process.returncode == 130 and took < 0.8 * GRACE_S, (process.returncode, took)
    print(f"SIGTERM to exit: {took:.2f} s")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] and report["stop_reason"] == "interrupted"
    assert not next(r for r in report["rules"] if r["name"] == "zombie_requests")["fired"]  # cancelled just now
    assert "cancelled" in report["requests"]["by_outcome"]
    engine_log = (tmp_path / "engine.log").read_text()
    assert "serving" in engine_log
    assert not alive(f"--port {report['target']['base_url'].rsplit(':', 1)[1]}")


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_sigterm_while_ab_starts_the_patched_engine_stops_it_and_exits_130(tmp_path):
    command, marker = never_healthy()
    process = start("ab", "--stock-cmd", SIM, "--patched-cmd", command, "--out", str(tmp_path), "--quiet")
    wait_for(process, "--- patched ---", timeout_s=200)
    until(lambda: engine_started(marker))
    took = interrupt(process, signal.SIGTERM)
    # At once, not after the 10 s grace in-flight requests get at a planned stop: the reports (pictures included)
    # and the engine's stop take 2-4 s on a busy 2-core machine.
    assert process.returncode == 130 and took < 0.8 * GRACE_S, (process.returncode, took)
    print(f"SIGTERM to exit: {took:.2f} s")
    assert not alive(marker)
    assert (tmp_path / "stock" / "report.json").exists()  # what it had is written
    assert os.path.exists(tmp_path / "patched" / "engine.log") and not (tmp_path / "compare.md").exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop itself, on purpose
def test_a_signal_whose_keyboardinterrupt_python_dropped_still_stops_the_next_run():
    """A signal handled while Python runs a `__del__` (or a weakref callback) raises KeyboardInterrupt there, and
    Python drops it ("Exception ignored in ..."): a sweep went on to its next level so. The signal is kept: no
    later run starts (`check`), and one already beginning is stopped at once (`routed_to`)."""
    import asyncio

    from loadrepro.runs.interrupts import Interrupts

    interrupts = Interrupts()

    class Dropper:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGINT)  # its handler runs inside this __del__, whose exception is dropped

    stopped: list[bool] = []

    async def beginning_run() -> None:
        with interrupts.routed_to(lambda: stopped.append(True)):
            await asyncio.sleep(0)

    with interrupts.installed():
        Dropper()  # collected at once; no KeyboardInterrupt comes out of it
        assert interrupts.received == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
        asyncio.run(beginning_run())
    assert stopped == [True]
    fresh = Interrupts()
    fresh.check()  # nothing received: nothing raised


def test_a_signal_while_the_event_loop_waits_is_raised_in_the_caller_of_a_stoppable_run():
    """A signal handled while the loop waits on a socket raises KeyboardInterrupt out of the loop itself, past the
    sweep that would keep its levels. Inside `stoppable` it cancels the work instead (whose `finally` runs), and
    KeyboardInterrupt is raised in the caller's task, where it can be caught; a cancel by the caller stays a cancel,
    and a signal to a load inside (routed to its own stop) is that load's."""
    import asyncio

    from loadrepro.runs.interrupts import Interrupts

    interrupts = Interrupts()
    unwound: list[str] = []

    async def planning() -> None:
        try:
            asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGINT)  # while it waits below
            await asyncio.Event().wait()
        finally:
            unwound.append("engines stopped")

    async def sweep() -> str:
        try:
            await interrupts.stoppable(planning())
        except KeyboardInterrupt:
            return "levels kept"
        return "went on"

    async def cancelled_by_caller() -> bool:
        task = asyncio.ensure_future(interrupts.stoppable(asyncio.Event().wait()))
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    async def load() -> str:
        stopped = asyncio.Event()
        with interrupts.routed_to(stopped.set):
            signal.raise_signal(signal.SIGINT)
            await stopped.wait()
        return "report written"

    with interrupts.installed():
        assert asyncio.run(sweep()) == "levels kept" and unwound == ["engines stopped"]
    with interrupts.installed():
        assert asyncio.run(cancelled_by_caller())
    with interrupts.installed():
        assert asyncio.run(interrupts.stoppable(load())) == "report written"


def test_a_wait_cut_short_by_a_stop_returns_none_and_cancels_it_and_a_quick_answer_still_counts():
    import asyncio

    from loadrepro.load.pause import unless

    async def scenario() -> tuple[object, bool, object, object]:
        stop, cancelled = asyncio.Event(), asyncio.Event()

        async def hung() -> str:
            try:
                await asyncio.Event().wait()
            finally:
                cancelled.set()
            return "never"

        async def quick() -> str:
            return "answered"

        asyncio.get_running_loop().call_soon(stop.set)
        cut = await unless(stop, hung())
        return cut, cancelled.is_set(), await unless(stop, quick()), await unless(asyncio.Event(), quick())

    assert asyncio.run(scenario()) == (None, True, "answered", "answered")


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_sigterm_while_the_last_health_poll_hangs_writes_the_report_and_exits_130(tmp_path, tokenizer_dir):
    """/health answers until the load begins, then hangs (each poll is given up only after 4 x 5 s): the run's last
    poll must not hold a SIGTERM."""
    import asyncio

    from tests.stub_server import StubServer, chat_app, serving

    stub = StubServer("ok", tokens=2)

    async def health(_):
        if stub.stats.requests:
            await asyncio.sleep(300)
        from aiohttp import web
        return web.Response()

    with serving(chat_app("stub", stub.generate, health=health, models=stub.models)) as url:
        process = start("run", "--base-url", url, "--out", str(tmp_path), "--quiet", "--tokenizer", str(tokenizer_dir),
                        "--set", "workload.conversations=3", "--set", "workload.turns=1",
                        "--set", "workload.prefix_tokens=200", "--set", "workload.max_tokens=2")
        requests = tmp_path / "requests.jsonl"
        until(lambda: requests.exists() and requests.read_text().count('"kind":"request"') >= 3, 120, "the load")
        took = interrupt(process, signal.SIGTERM)
    assert process.returncode == 130 and took < 0.8 * GRACE_S, (process.returncode, took, process.stderr.read())
    print(f"SIGTERM to exit: {took:.2f} s")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] and report["requests"]["by_outcome"] == {"ok": 3}


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_sigterm_while_planning_waits_on_a_hung_tokenize_exits_130(tmp_path):
    """Counting the workload's tokens asks the target; one that never answers /tokenize holds each request for 30 s:
    a SIGTERM then must not wait for it."""
    import asyncio
    import threading

    from aiohttp import web

    from tests.stub_server import StubServer, chat_app, serving

    asked = threading.Event()

    async def hung(_):
        asked.set()
        await asyncio.sleep(300)
        return web.json_response({"count": 1})

    stub = StubServer("ok", tokens=2)
    with serving(chat_app("stub", stub.generate, web.post("/tokenize", hung), models=stub.models)) as url:
        process = start("run", "--base-url", url, "--out", str(tmp_path), "--quiet")
        assert asked.wait(60), process.stderr.read() if process.poll() is not None else "never asked to count"
        took = interrupt(process, signal.SIGTERM)
    assert process.returncode == 130 and took < 0.8 * GRACE_S, (process.returncode, took, process.stderr.read())
    print(f"SIGTERM to exit: {took:.2f} s")
    assert stub.stats.requests == 0  # no load was sent


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_sigterm_while_answers_are_checked_writes_the_report_and_exits_130(tmp_path, tokenizer_dir):
    """[verify] sends each completed request again alone after the load, one at a time: a SIGTERM then keeps what
    was checked and the run's report."""
    from tests.stub_server import StubServer

    with StubServer("ok", tokens=20, token_delay_s=0.1).running() as stub:
        process = start("run", "--base-url", stub.url, "--out", str(tmp_path), "--quiet", "--tokenizer",
                        str(tokenizer_dir), "--set", "workload.conversations=4", "--set", "workload.turns=1",
                        "--set", "workload.prefix_tokens=200", "--set", "workload.max_tokens=20",
                        "--set", "verify.outputs='all'", "--set", "model='stub'")
        wait_for(process, "checking answers")
        took = interrupt(process, signal.SIGTERM)
    assert process.returncode == 130 and took < 0.8 * GRACE_S, (process.returncode, took)
    print(f"SIGTERM to exit: {took:.2f} s")
    report = json.loads((tmp_path / "report.json").read_text())
    checked = (report["outputs"] or {}).get("checked", 0)  # none, when the signal came before the first
    assert report["requests"]["by_outcome"] == {"ok": 4} and checked < 4, report["outputs"]
