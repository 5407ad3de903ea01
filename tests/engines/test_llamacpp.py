"""llama.cpp's server with tiny local GGUF models: a unified KV pool that the load overruns (a real failure)
against per-slot contexts that queue and reject (the fix), as a real-engine A/B. Assertions are on reports."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import pytest

from loadrepro.cli.summary_lines import describe_probe
from loadrepro.config.profile_files import load_profile
from loadrepro.load.engine import ManagedEngine
from loadrepro.load.probe import probe
from loadrepro.load.transport import Transport
from loadrepro.workload.plan import TOLERANCE, plan_workload
from loadrepro.workload.tokens import detect_counter
from tests.engines.conftest import SCRIPTS, loadrepro, print_margins
from tests.examples import save_example

pytestmark = [pytest.mark.engine, pytest.mark.timeout(3600)]  # a fresh machine builds the engine first


def command(model: Path, *extra: str) -> str:
    return shlex.join([str(SCRIPTS / "serve-llamacpp.sh"), str(model), "{host}", "{port}", *extra])


def report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def test_unified_pool_fails_and_per_slot_contexts_fix_it(gguf_26m, tmp_path):
    done = loadrepro("ab", "--profile", "llamacpp-unified-pool", "--out", str(tmp_path), "--quiet",
                     "--stock-cmd", command(gguf_26m, "-kvu", "-c", "1024", "-np", "4"),
                     "--patched-cmd", command(gguf_26m, "-c", "2048", "-np", "4"))
    assert done.returncode == 0, done.stdout + done.stderr
    stock, patched = report(tmp_path / "stock"), report(tmp_path / "patched")
    assert stock["verdict"] == "fail"
    failed = {k: v for k, v in stock["requests"]["by_outcome"].items() if k in ("server_error", "stream_error")}
    assert failed, stock["requests"]
    assert "Context size has been exceeded" in stock["first_failure"]["detail"]
    assert any(s["name"] == "llamacpp-context-exceeded" for s in stock["signatures"])
    assert patched["verdict"] == "pass"
    assert patched["requests"]["by_outcome"].get("rejected", 0) >= 1
    rejection = next(r["detail"] for r in patched["rules"] if r["name"] == "rejections")
    assert "exceed_context_size_error" in rejection
    assert patched["pressure"]["waiting_peak"] >= 1  # queueing on the four slots, seen in the metrics
    assert (tmp_path / "compare.md").read_text().startswith("# loadrepro compare: fix confirmed")
    save_example("llamacpp-unified-pool-stock-report.md", (tmp_path / "stock" / "report.md").read_text(), tmp_path)
    save_example("llamacpp-unified-pool-compare.md", (tmp_path / "compare.md").read_text(), tmp_path)


def test_calibrated_lengths_hit_their_targets_in_llamacpps_tokens(gguf_tiny, tmp_path):
    engine = ManagedEngine(command(gguf_tiny, "-c", "16384", "-np", "1"), tmp_path / "engine.log")
    engine.start(timeout_s=120)
    profile = load_profile("quickstart", ["workload.conversations=3", "workload.turns=2",
                                          "workload.prefix_tokens=3000", "model='tiny'"])
    try:
        async def go():
            async with Transport(engine.url, timeout_s=60) as http:
                counter = await detect_counter(http, "tiny")
                plan = await plan_workload(profile, counter)
                counted = [await counter.count_chat(r.payload()["messages"]) for r in plan.workload.requests]
                return counter, plan, counted

        counter, plan, counted = asyncio.run(go())
        seen = asyncio.run(probe(engine.url))
    finally:
        engine.stop()
    assert counter.source == "POST /tokenize (llama.cpp)"
    assert seen.flavour == "llama.cpp" and seen.tokenize == "POST /tokenize (llama.cpp)", seen
    assert seen.max_model_len == 16384 and {"waiting", "running"} <= set(seen.series), seen
    save_example("probe-llamacpp.txt", "$ loadrepro probe --base-url http://127.0.0.1:PORT\n" +
                 "\n".join(describe_probe(seen)).replace(engine.url, "http://127.0.0.1:PORT") + "\n")
    for request, actual in zip(plan.workload.requests, counted):
        assert abs(actual - request.expected_prompt_tokens) <= TOLERANCE * request.expected_prompt_tokens


def test_a_healthy_server_that_closes_kept_alive_connections_passes(gguf_26m, tmp_path):
    """llama-server (cpp-httplib) closes kept-alive connections after streamed answers; those requests are resent
    on a new connection and counted, never failures. Every answer under that load is the one the same request
    gets alone (llama.cpp offers no prefix-cache reset, so a reference may meet a warm cache)."""
    done = loadrepro("run", "--profile", "llamacpp-unified-pool", "--out", str(tmp_path), "--quiet",
                     "--engine-cmd", command(gguf_26m, "-c", "4096", "-np", "4"),
                     "--set", "workload.conversations=40", "--set", "workload.turns=4",
                     "--set", "workload.prefix_tokens=200", "--set", "workload.prefix_tokens_p95=0",
                     "--set", "workload.turn_tokens=50", "--set", "workload.max_tokens=8",
                     "--set", "load.concurrency=4", "--set", "verify.outputs='all'")
    assert done.returncode == 0, done.stdout + done.stderr
    r = report(tmp_path)
    assert r["verdict"] == "pass" and r["requests"]["by_outcome"] == {"ok": 160}, r["reasons"]
    assert r["lengths"]["requests"] == 160 and r["lengths"]["error_p95"] <= 0.05
    assert r["calibration"]["source"] == "POST /tokenize (llama.cpp)" and r["calibration"]["probe_requests"] == 0
    outputs = r["outputs"]
    assert outputs["checked"] == 160 and outputs["diverged"] == outputs["garbled"] == outputs["cross_talk"] == 0
    assert outputs["unverifiable"] == 0, outputs  # llama.cpp streams logprobs
    print_margins(tmp_path, outputs)


def test_a_paused_engine_and_an_abort_burst_both_recover(gguf_26m, tmp_path):
    """llama-server stopped (SIGSTOP) for 5 s mid-soak, then 3 streams cancelled at once: it serves again within
    the recovery limits, and its slots come back (its running count no more than loadrepro's in flight, and
    nothing running after the load)."""
    events = ('[{at_s=10, action="pause", duration_s=5, recover_within_s=20}, '
              '{at_s=22, action="abort_burst", count=3, recover_within_s=20}]')
    done = loadrepro("run", "--profile", "llamacpp-unified-pool", "--out", str(tmp_path), "--quiet",
                     "--engine-cmd", command(gguf_26m, "-c", "4096", "-np", "4"),
                     "--set", "workload.conversations=400", "--set", "workload.turns=2",
                     "--set", "workload.prefix_tokens=200", "--set", "workload.prefix_tokens_p95=0",
                     "--set", "workload.turn_tokens=50", "--set", "workload.max_tokens=32",
                     "--set", "load.concurrency=4", "--set", "load.duration_s=30", "--set", f"chaos.events={events}")
    assert done.returncode == 0, done.stdout + done.stderr
    r = report(tmp_path)
    pause, burst = r["chaos"]
    assert pause["action"] == "pause" and pause["recovered"] and pause["health_s"] is not None, pause
    assert burst["action"] == "abort_burst" and burst["recovered"] and burst["running_s"] is not None, burst
    assert "cancelled 3 of the requests in flight" in burst["detail"]
    assert r["requests"]["by_outcome"].get("cancelled") == 3
    assert not next(x for x in r["rules"] if x["name"] == "zombie_requests")["fired"]
    print(f"llama.cpp: pause {pause['detail']}\nabort burst {burst['detail']}")


def test_a_run_that_started_llamacpp_is_shrunk_on_fresh_ports(gguf_tiny, tmp_path):
    """`loadrepro shrink RUN_DIR` of a run whose engine command had {port}: each trial's llama-server listens on
    the port that trial chose, and the search reaches a smaller workload that fails as the run did."""
    run = tmp_path / "run"
    done = loadrepro("run", "--engine-cmd", command(gguf_tiny, "-kvu", "-c", "1024", "-np", "4"), "--out", str(run),
                     "--quiet", "--set", "workload.conversations=8", "--set", "workload.turns=1", "--set",
                     "workload.prefix_tokens=250", "--set", "workload.max_tokens=250", "--set", "load.concurrency=8")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Context size has been exceeded" in report(run)["first_failure"]["detail"]
    shrunk = loadrepro("shrink", str(run), "--out", str(tmp_path / "shrink"), "--max-trials", "4",
                       "--time-budget", "120")
    assert shrunk.returncode == 0, shrunk.stdout + shrunk.stderr
    minimal = report(tmp_path / "shrink" / "run")
    assert minimal["requests"]["total"] < 8 and "Context size has been exceeded" in minimal["first_failure"]["detail"]
    assert minimal["target"]["base_url"] != report(run)["target"]["base_url"]


def test_the_readme_profile_on_a_2048_token_server_tested_nothing_and_a_starter_fits_it(gguf_26m, tmp_path):
    """llama-server -c 2048 (4 slots of 2,048 tokens sharing one pool): dsa-prefix-shared's 81k-token prompts are
    all refused, which is no pass (exit 2, rule nothing_fit, said before the load); `init llamacpp`'s profile runs
    clean on the same server."""
    engine = ManagedEngine(command(gguf_26m, "-c", "2048"), tmp_path / "engine.log")
    engine.start(timeout_s=120)
    try:
        nothing = loadrepro("run", "--profile", "dsa-prefix-shared", "--base-url", engine.url,
                            "--out", str(tmp_path / "dsa"))
        starter = tmp_path / "starter.toml"
        written = loadrepro("init", "llamacpp", "--base-url", engine.url, "-o", str(starter))
        ran = loadrepro("run", "--profile", str(starter), "--base-url", engine.url, "--out", str(tmp_path / "starter"),
                        "--quiet")
    finally:
        engine.stop()
    found = report(tmp_path / "dsa")
    assert nothing.returncode == 2 and found["requests"]["by_outcome"] == {"rejected": 12}, nothing.stdout
    assert next(r for r in found["rules"] if r["name"] == "nothing_fit")["facts"]["context_tokens"] == 2048
    assert "fit: none of the 24 planned requests fit the target" in nothing.stderr, nothing.stderr
    assert written.returncode == 0, written.stderr
    clean = report(tmp_path / "starter")
    assert ran.returncode == 0 and set(clean["requests"]["by_outcome"]) == {"ok"}, (ran.stdout, clean["requests"])
