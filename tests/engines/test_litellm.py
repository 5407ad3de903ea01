"""A real gateway: the LiteLLM proxy, wanting its key on every request, in front of llama.cpp's server. Healthy,
the run passes with lengths counted through the gateway; llama.cpp killed behind it, while every health path of
the gateway keeps answering 200, the run fails with the engine's death and stops within seconds."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadrepro.load.engine import ManagedEngine
from tests.engines.conftest import ROOT, SCRIPTS
from tests.examples import save_example
from tests.helpers import until

pytestmark = [pytest.mark.engine, pytest.mark.timeout(3600)]  # a fresh machine installs the proxy first
KEY = "sk-loadrepro-gateway-test-0123"
RUN = ["--profile", "llamacpp-unified-pool", "--set", "workload.conversations=8", "--set", "workload.turns=2",
       "--set", "workload.prefix_tokens=1500", "--set", "workload.prefix_tokens_p95=0",
       "--set", "workload.max_tokens=16",
       "--set", "workload.turn_tokens=40", "--set", "load.concurrency=4", "--set", "watch.metrics_path=''",
       "--quiet"]


@pytest.fixture
def llama(gguf_tiny, tmp_path):
    engine = ManagedEngine(shlex.join([str(SCRIPTS / "serve-llamacpp.sh"), str(gguf_tiny), "{host}", "{port}",
                                       "-c", "8192", "-np", "4"]), tmp_path / "llama.log")
    engine.start(timeout_s=120)
    yield engine
    engine.stop()


@pytest.fixture
def gateway(litellm_proxy, llama, tmp_path):
    command = shlex.join([f"LITELLM_MASTER_KEY={KEY}", str(SCRIPTS / "serve-litellm.sh"), f"{llama.url}/v1", "tiny",
                          "{host}", "{port}"])
    proxy = ManagedEngine(command, tmp_path / "litellm.log", health_path="/health/liveliness")
    proxy.start(timeout_s=300)
    yield proxy
    proxy.stop()


def _loadrepro(out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    return subprocess.Popen([sys.executable, "-m", "loadrepro", "run", "--out", str(out), *RUN, *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def test_a_healthy_engine_behind_a_keyed_gateway_passes_with_lengths_counted_through_it(gateway, tmp_path):
    done = _loadrepro(tmp_path, "--base-url", gateway.url)
    output, _ = done.communicate(timeout=600)
    data = report(tmp_path)
    assert done.returncode == 0, output
    assert data["requests"]["by_outcome"] == {"ok": 16}
    assert data["calibration"]["source"].startswith("usage.prompt_tokens of probes")  # no tokenize through it
    # Probes through the gateway count as well as probes straight to llama.cpp: this workload planned by probes
    # against llama-server directly measured error p50 4.6%, max 15.5% (the tiny model's byte-level tokenizer
    # costs record kinds unevenly); estimates without counting were 74% long.
    lengths = data["lengths"]
    assert lengths["requests"] == 16 and lengths["error_p50"] <= 0.07 and lengths["error_max"] <= 0.2, lengths
    assert KEY not in (tmp_path / "report.json").read_text()


def _wait_for_requests(run_dir: Path, count: int, timeout_s: float = 300) -> None:
    path = run_dir / "requests.jsonl"
    until(lambda: path.exists() and len(path.read_text().splitlines()) >= count, timeout_s, f"{count} requests")


def test_llamacpp_killed_behind_the_gateway_is_death_and_stops_the_run(gateway, llama, tmp_path):
    done = _loadrepro(tmp_path, "--base-url", gateway.url, "--set", "load.duration_s=300")
    try:
        _wait_for_requests(tmp_path, 8)
        os.kill(llama.pid, signal.SIGKILL)
        killed = time.monotonic()
        output, _ = done.communicate(timeout=300)
        after_kill_s = time.monotonic() - killed
    finally:
        if done.poll() is None:
            done.kill()
    data = report(tmp_path)
    assert done.returncode == 1, output
    assert data["stop_reason"] == "engine_death", data["reasons"]
    death = next(r["detail"] for r in data["rules"] if r["name"] == "engine_death")
    assert "failed with the gateway's `gateway-upstream-connection`" in death and "belongs to the gateway" in death
    assert all(t["status"] == 200 for t in data["health"]["transitions"])  # the gateway's /health never knew
    assert after_kill_s < 60, after_kill_s  # its own retries take ~5 s per request; the run stops soon after
    print(f"stopped {after_kill_s:.1f} s after the kill; {data['reasons'][0]}")
    save_example("litellm-upstream-death-report.md", (tmp_path / "report.md").read_text(), tmp_path)
