"""Seed 003's profile at full scale on the simulated engine: the patched engine queues follow-ups for longer
than the stall timeout while others stream, which is waiting, not stalling."""

import json
from pathlib import Path

import pytest

from tests.helpers import cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(900)
@pytest.mark.slow
def test_dsa_prefix_shared_at_full_scale_confirms_the_fix(tmp_path):
    done = cli("ab", "--profile", "dsa-prefix-shared", "--out",
                           str(tmp_path), "--quiet")
    assert done.returncode == 0 and "fix confirmed" in done.stdout, done.stdout + done.stderr[-2000:]
    stock = json.loads((tmp_path / "stock" / "report.json").read_text())
    patched = json.loads((tmp_path / "patched" / "report.json").read_text())
    assert any(s["name"] == "trtllm-draft-resize-failed" for s in stock["signatures"]), stock["signatures"]
    assert patched["requests"]["by_outcome"] == {"ok": 24}
