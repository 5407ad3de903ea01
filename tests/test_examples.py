"""The committed example outputs read the same on any machine: no absolute path of the one they were made on."""

import sys

import pytest

from tests.examples import ENGINE_CACHE, EXAMPLES, MACHINE_PATH, ROOT, portable

TEXTS = sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".md", ".txt", ".json"))


@pytest.mark.parametrize("path", TEXTS, ids=[p.name for p in TEXTS])
def test_examples_carry_no_machine_paths(path):
    found = MACHINE_PATH.findall(path.read_text())
    assert not found, f"{path.name} carries this machine's paths: {found[:3]}"


def test_portable_rewrites_runs_checkout_cache_and_interpreter(tmp_path):
    text = (f"--out {tmp_path}/stock --engine-cmd '{ROOT}/scripts/engines/serve-vllm.sh "
            f"{ENGINE_CACHE}/models/m' and {sys.executable} -m loadrepro sim")
    shown = portable(text, tmp_path)
    assert shown == ("--out runs/stock --engine-cmd 'scripts/engines/serve-vllm.sh ~/.cache/loadrepro-engines/models/m'"
                     " and python -m loadrepro sim")
    assert not MACHINE_PATH.findall(shown)


def test_the_pattern_finds_what_it_must():
    assert MACHINE_PATH.findall("see /tmp/pytest-of-root/x and /work/main/scripts")
    assert not MACHINE_PATH.findall("GET /v1/models, ~/.cache/loadrepro-engines/x, runs/stock, POST /tokenize")
