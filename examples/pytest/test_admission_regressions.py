"""Admission regressions as an engine's own test suite would write them, with loadrepro's pytest plugin.

The `loadrepro_run` fixture comes with loadrepro (`pip install loadrepro`). ENGINE_CMD names the engine under test,
with `{port}` (and `{host}`) for loadrepro to fill in; here it defaults to loadrepro's simulated engine with the
admission fix, so that the examples run anywhere:

    ENGINE_CMD="vllm serve my-model --port {port} --max-model-len 16384" pytest examples/pytest
"""

from __future__ import annotations

import os
import shlex
import sys

SIMULATED = shlex.join([sys.executable, "-m", "loadrepro", "sim", "--scenario", "draft-pool", "--policy", "patched",
                        "--block-size", "16", "--primary-blocks", "4096", "--draft-blocks", "3100",
                        "--max-model-len", "16384"]) + " --port {port}"
ENGINE_CMD = os.environ.get("ENGINE_CMD", SIMULATED)


def test_the_draft_pool_admission_fix_holds(loadrepro_run):
    """Stock breaks on the seed workload, patched serves it: the fix is confirmed, request by request."""
    comparison = loadrepro_run.ab("quickstart")
    assert comparison.fix_confirmed, comparison.detail


def test_the_engine_serves_the_seed_workload_without_dying(loadrepro_run):
    report = loadrepro_run("quickstart", engine_cmd=ENGINE_CMD)
    assert report.passed, report
    assert not any(f.name in ("engine_death", "fatal_signature") for f in report.findings)


async def test_prefix_reuse_holds_under_shared_prefixes(loadrepro_run):
    """From an async test (pytest-asyncio): the same fixture, awaited."""
    report = await loadrepro_run.arun("healthy", overrides=["workload.conversations=2", "workload.turns=2"])
    assert report.passed, report
    assert report.cache.cached_tokens and report.cache.cached_tokens > 0
