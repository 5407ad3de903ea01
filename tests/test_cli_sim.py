"""`loadrepro sim` as a user runs it: a real process, a real port, Ctrl-C to stop."""

import re
import signal
import subprocess
import sys

import httpx

from tests.helpers import cli


def test_sim_prints_its_url_serves_and_stops_on_ctrl_c(tmp_path):
    log = tmp_path / "sim.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "loadrepro", "sim", "--scenario", "draft-pool", "--policy", "stock", "--port", "0",
         "--log", str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert match, line
        url = match.group(0)
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        assert httpx.get(f"{url}/v1/models", timeout=5).json()["data"][0]["id"] == "loadrepro-sim"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "draft-pool (stock policy)" in log.read_text()


def test_bad_sizing_is_a_usage_error():
    result = cli("sim", "--primary-blocks", "0", "--port", "0")
    assert result.returncode == 2
    assert "'--primary-blocks'" in result.stderr and "greater than or equal to 1" in result.stderr
