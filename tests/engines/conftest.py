"""Real engines for the `engine` tests: installed (or built) once into a cache outside the checkout by
scripts/engines/, with tiny models written here. A test is skipped, with the reason, only when its engine cannot
be installed on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import Done, cli

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "engines"
CACHE = Path(os.environ.get("LOADREPRO_ENGINE_CACHE", Path.home() / ".cache" / "loadrepro-engines"))
INSTALL_TIMEOUT_S = 1800


def _install(script: str) -> str:
    done = subprocess.run(["bash", str(SCRIPTS / script)], capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        pytest.skip(f"{script} could not install its engine here: {done.stderr.strip()[-600:]}")
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def llama_server() -> str:
    return _install("llamacpp.sh")


def _gguf(size: str) -> Path:
    done = subprocess.run(["bash", str(SCRIPTS / "gguf.sh"), size], capture_output=True, text=True, check=True,
                          timeout=600, env={**os.environ, "PYTHON": sys.executable})
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def gguf_tiny(llama_server) -> Path:
    return _gguf("tiny")


@pytest.fixture(scope="session")
def gguf_26m(llama_server) -> Path:
    return _gguf("26m")


@pytest.fixture(scope="session")
def litellm_proxy() -> str:
    return _install("litellm.sh")


@pytest.fixture(scope="session")
def prometheus() -> str:
    return _install("prometheus.sh")


@pytest.fixture(scope="session")
def vllm_python() -> str:
    return _install("vllm.sh")


@pytest.fixture(scope="session")
def vllm_model(vllm_python) -> Path:
    done = subprocess.run(["bash", str(SCRIPTS / "hf.sh")], capture_output=True, text=True, check=True, timeout=600,
                          env={**os.environ, "PYTHON": sys.executable})
    return Path(done.stdout.strip().splitlines()[-1])


def loadrepro(*args: str) -> Done:
    """The command line in this process: what is checked is the run against the engine, not the entry point."""
    return cli(*args)


def print_margins(run_dir: Path, outputs: dict) -> None:
    """For the record (pytest -s): how sure the engine was of its tokens, and what the answer check found."""
    from loadrepro.records import read_jsonl

    margins = sorted(lp - ru for row in read_jsonl(run_dir / "requests.jsonl") if row.get("answer")
                     for lp, ru in zip(row["answer"]["logprobs"], row["answer"]["runner_up"]) if ru is not None)
    share = sum(m < 1.0 for m in margins) / len(margins)
    print(f"answers: {outputs['identical']} identical, {outputs['near_tie']} near-ties (up to "
          f"{outputs['near_tie_margin_max']} nats); {len(margins)} positions, margin p5 "
          f"{margins[len(margins) // 20]:.2f} p50 {margins[len(margins) // 2]:.2f} nats, {share:.0%} under 1 nat")
