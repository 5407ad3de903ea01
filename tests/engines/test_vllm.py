"""vLLM's CPU build with a tiny local model: pressure that passes, queue-limit throttling, and a killed engine.
Every assertion is on loadrepro's report."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadrepro.cli.summary_lines import describe_probe
from loadrepro.config.profile_files import load_profile
from loadrepro.load.engine import ManagedEngine
from loadrepro.load.probe import probe
from loadrepro.load.transport import Transport
from loadrepro.records import read_jsonl
from loadrepro.workload.plan import TOLERANCE, plan_workload
from loadrepro.workload.tokens import (
    HttpTokenCounter,
    LocalTokenizerCounter,
    detect_counter,
)
from tests.engines.conftest import ROOT, SCRIPTS, loadrepro, print_margins
from tests.examples import save_example
from tests.helpers import rebuilt_alike, until

pytestmark = [pytest.mark.engine, pytest.mark.timeout(3600)]  # a fresh machine builds the engine first
POOL = ["--max-model-len", "16384", "--enable-prefix-caching", "--block-size", "32", "--num-gpu-blocks-override",
        "640", "--kv-cache-memory-bytes", "67108864", "--enable-prompt-tokens-details"]


def command(model: Path, *extra: str) -> str:
    return shlex.join([str(SCRIPTS / "serve-vllm.sh"), str(model), "{host}", "{port}", *POOL, *extra])


def report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


@pytest.fixture(scope="module")
def vllm(vllm_model, tmp_path_factory):
    # Dev mode serves POST /reset_prefix_cache, so that answers are checked against references computed cold.
    # No whitespace in structured answers: a tiny model pads a JSON answer with spaces to max_tokens otherwise.
    engine = ManagedEngine("VLLM_SERVER_DEV_MODE=1 " + command(vllm_model, "--max-num-seqs", "8",
                                                               "--structured-outputs-config",
                                                               '{"backend":"xgrammar","disable_any_whitespace":true}'),
                           tmp_path_factory.mktemp("vllm") / "engine.log")
    engine.start(timeout_s=600)
    yield engine
    engine.stop()


def test_probe_sees_vllm_its_tokenizer_metrics_and_cached_tokens(vllm):
    seen = asyncio.run(probe(vllm.url))
    assert seen.flavour == "vLLM" and seen.tokenize == "POST /tokenize (vLLM)", seen
    assert seen.health.status == 200 and {"KV usage", "waiting", "running", "prefix cache"} <= set(seen.series), seen
    assert seen.usage.streamed_usage and seen.usage.cached_tokens, seen.usage
    assert seen.limits.startswith("vLLM vllm:cache_config_info"), seen.limits
    save_example("probe-vllm.txt", "$ loadrepro probe --base-url http://127.0.0.1:PORT\n" +
                 "\n".join(describe_probe(seen)).replace(vllm.url, "http://127.0.0.1:PORT") + "\n")


def test_prefix_shared_overrun_is_pressure_handled_with_prefix_reuse(vllm, tmp_path):
    done = loadrepro("run", "--profile", "vllm-prefix-overrun", "--base-url", vllm.url, "--out", str(tmp_path),
                     "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    data = report(tmp_path)
    assert data["verdict"] == "pass" and data["requests"]["by_outcome"] == {"ok": 10}
    assert data["pressure"]["preemptions"] >= 1 and data["pressure"]["waiting_peak"] >= 1
    rules = {r["name"]: r for r in data["rules"]}
    assert rules["pressure_in_metrics"]["fired"] and not rules["prefix_reuse_missing"]["fired"]
    later = [r for r in data["request_table"] if r["turn"] == 2]
    assert all(r["cached_tokens"] >= 0.8 * r["shared_prefix_tokens"] for r in later)
    assert data["capacity"]["source"] == "vLLM vllm:cache_config_info" and data["capacity"]["pool_tokens"] == 20480
    lengths = data["lengths"]  # planned against vLLM's own usage.prompt_tokens, request by request
    assert lengths["requests"] == 10 and lengths["error_max"] <= 0.02, lengths
    memory = data["engine_memory"]  # a URL target: its API server's resident memory, from its /metrics
    assert memory["source"] == "metrics" and memory["readings"] >= 2 and memory["start_mb"] > 100, memory
    save_example("vllm-prefix-overrun-report.md", (tmp_path / "report.md").read_text(), tmp_path)


def test_every_answer_under_pressure_is_the_one_the_same_request_gets_alone(vllm, tmp_path):
    """The prefix-shared overrun (preemptions, prefix reuse) with every answer checked against the same request
    sent alone on the idle engine, its prefix cache reset first: a healthy vLLM passes, differences only at
    near-ties. What the margins were is printed for the record."""
    done = loadrepro("run", "--profile", "vllm-prefix-overrun", "--base-url", vllm.url, "--out", str(tmp_path),
                     "--set", "verify.outputs='all'", "--quiet")
    data = report(tmp_path)
    assert data["verdict"] == "pass", done.stdout + done.stderr
    outputs = data["outputs"]
    assert outputs["checked"] == 10 and outputs["diverged"] == outputs["garbled"] == outputs["cross_talk"] == 0
    assert outputs["unverifiable"] == 0, outputs  # vLLM streams logprobs
    assert "prefix cache reset before each (POST /reset_prefix_cache)" in " ".join(data["notes"])
    print_margins(tmp_path, outputs)


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_the_responses_and_messages_apis_are_read_like_chat(vllm, tmp_path, api):
    """vLLM serves /v1/responses and /v1/messages: the same workload through each completes, its lengths and
    cached tokens read from each API's own usage."""
    done = loadrepro("run", "--profile", "vllm-prefix-overrun", "--base-url", vllm.url, "--out", str(tmp_path),
                     "--set", f"api={api!r}", "--set", "workload.conversations=3", "--set", "workload.max_tokens=64",
                     "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    data = report(tmp_path)
    assert data["requests"]["by_outcome"] == {"ok": 6} and data["latency"]["ttft_ms"]["p50"] is not None
    assert data["lengths"]["requests"] == 6 and data["lengths"]["error_max"] <= 0.02, data["lengths"]
    later = [r for r in data["request_table"] if r["turn"] == 2]
    assert all(r["cached_tokens"] >= 0.8 * r["shared_prefix_tokens"] for r in later), later
    assert all(0 < r["output_tokens"] <= 64 for r in later)  # Messages has no ignore_eos: it may stop early


def test_a_prompt_over_max_model_len_is_rejected_with_vllms_text(vllm, tmp_path):
    done = loadrepro("run", "--profile", "vllm-prefix-overrun", "--base-url", vllm.url, "--out", str(tmp_path),
                     "--set", "workload.conversations=1", "--set", "workload.turns=1",
                     "--set", "workload.prefix_tokens=17000", "--quiet")
    data = report(tmp_path)
    assert data["requests"]["by_outcome"] == {"rejected": 1}, done.stdout
    rejection = next(r["detail"] for r in data["rules"] if r["name"] == "rejections")
    assert "maximum context length is 16384 tokens" in rejection


def test_calibrated_lengths_hit_their_targets_in_vllms_tokens(vllm):
    profile = load_profile("vllm-prefix-overrun", ["workload.turns=3"])

    async def go():
        async with Transport(vllm.url, timeout_s=60) as http:
            counter = await detect_counter(http, "tiny")
            plan = await plan_workload(profile, counter)
            counted = [await counter.count_chat(r.payload()["messages"]) for r in plan.workload.requests]
            return counter, plan, counted

    counter, plan, counted = asyncio.run(go())
    assert counter.source == "POST /tokenize (vLLM)"
    for request, actual in zip(plan.workload.requests, counted):
        assert abs(actual - request.expected_prompt_tokens) <= TOLERANCE * request.expected_prompt_tokens


def test_probe_calibration_without_tokenize_is_bounded_and_close_in_vllms_tokens(vllm):
    """As against an engine with no tokenize endpoint: salted probes only, one at a time, within 5% of the
    workload's prompt tokens; the built prompts are then counted by vLLM's /tokenize."""
    profile = load_profile("vllm-prefix-overrun", ["workload.turns=3"])

    async def go():
        async with Transport(vllm.url, timeout_s=60) as http:
            plan = await plan_workload(profile, HttpTokenCounter(http, "probe", "tiny"))
            exact = await detect_counter(http, "tiny")
            counted = [await exact.count_chat(r.payload()["messages"]) for r in plan.workload.requests]
            return plan, counted

    plan, counted = asyncio.run(go())
    planned = [r.expected_prompt_tokens for r in plan.workload.requests]
    assert 0 < plan.probe_requests <= 64 and plan.probe_tokens <= 0.05 * sum(planned) and plan.checks == ()
    errors = sorted(abs(c - p) / p for c, p in zip(counted, planned))
    # Without per-record counts a conversation's few dozen records are costed by their kind's tokens per character:
    # a few percent off, where /tokenize gets within 2%.
    assert errors[len(errors) // 2] <= 0.035 and errors[-1] <= 0.07, errors


STRUCTURED = """
name = "vllm-structured"
api = "chat"
model = "tiny"
[workload]
seed = 4
conversations = 96  # a warm engine answers 32 within the first second, before the malformed requests
turns = 1
prefix_tokens = 300
max_tokens = 48
structured_share = 0.25
[load]
concurrency = 4
request_timeout_s = 120
stall_timeout_s = 60
[[chaos.events]]
at_s = 1.0
action = "malformed"
count = 1
recover_within_s = 20
"""


def test_json_schema_answers_parse_and_every_malformed_request_is_refused(vllm, tmp_path):
    """A quarter of the requests ask for a json_schema answer (every one that ended must parse), and one request
    of each malformed kind goes beside the load (each must get a 4xx, /health staying 200)."""
    path = tmp_path / "structured.toml"
    path.write_text(STRUCTURED)
    done = loadrepro("run", "--profile", str(path), "--base-url", vllm.url, "--out", str(tmp_path / "run"), "--quiet")
    data = report(tmp_path / "run")
    assert done.returncode == 0 and data["verdict"] == "pass", done.stdout + done.stderr
    s = data["structured_outputs"]
    assert s["answers"] >= 4 and s["unparsed"] == 0 and s["cut"] == 0, s
    detail = data["chaos"][0]["detail"]
    print(detail)
    for kind in ("invalid_utf8", "bad_json", "wrong_types", "huge_body", "negative_max_tokens"):
        assert f"{kind}: HTTP 400" in detail, detail
    assert not next(r for r in data["rules"] if r["name"] == "bad_input_crash")["fired"]


MIXED = STRUCTURED.replace("structured_share = 0.25", '''structured_share = 0.5
structured_format = ["json_schema", "choice", "regex", "grammar"]''')
MIXED = MIXED.replace("count = 1", 'count = 1\nkind = "bad_grammar"')


def test_choices_regexes_and_grammars_are_answered_as_asked_and_a_bad_grammar_refused(vllm, tmp_path):
    """Half the requests ask for a JSON object, one of two words, a regex match or a grammar's (drawn): every checked
    answer that ended is what it asked for; a grammar that defines its root twice, sent after them, leaves the
    engine serving (0.25.1 died of it: docs/real-bugs.md)."""
    path = tmp_path / "mixed.toml"
    path.write_text(MIXED)
    done = loadrepro("run", "--profile", str(path), "--base-url", vllm.url, "--out", str(tmp_path / "run"), "--quiet")
    data = report(tmp_path / "run")
    assert done.returncode == 0 and data["verdict"] == "pass", done.stdout + done.stderr
    s = data["structured_outputs"]
    print(s, data["chaos"][0]["detail"])
    assert s["answers"] >= 8 and s["unparsed"] == 0 and s["cut"] == 0 and 0 < s["unchecked"] < s["answers"], s
    assert "bad_grammar: HTTP " in data["chaos"][0]["detail"]


def test_ngram_speculation_is_read_from_vllms_counters(vllm_model, tmp_path):
    """vLLM says its drafts in /metrics only: speculative comes from those counters. The random-weight test model
    accepts none of them (measured: 130 drafted, 0 accepted), so min_draft_acceptance fails the run."""
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2})
    done = loadrepro("run", "--profile", "healthy", "--out", str(tmp_path), "--quiet", "--set",
                     "workload.conversations=6", "--set", "workload.prefix_tokens=300", "--set",
                     "workload.turn_tokens=50", "--set", "workload.max_tokens=64", "--set", "load.concurrency=2",
                     "--set", "verdict.min_draft_acceptance=0.1", "--engine-cmd",
                     command(vllm_model, "--speculative-config", spec))
    data = report(tmp_path)
    speculative = data["speculative"]
    assert speculative["source"] == "metrics" and speculative["draft_tokens"] > 0, (speculative, done.stdout)
    assert speculative["accepted_tokens"] <= speculative["draft_tokens"] and speculative["per_request"] == []
    found = {r["name"]: r for r in data["rules"]}["spec_acceptance_collapse"]
    assert found["fired"] == (speculative["acceptance_rate"] < 0.1), found


def test_queue_limit_surplus_is_throttled_not_a_server_error(vllm_model, tmp_path):
    done = loadrepro("run", "--profile", "vllm-queue-limit", "--out", str(tmp_path), "--quiet", "--engine-cmd",
                     command(vllm_model, "--max-num-seqs", "2", "--max-num-queued-reqs", "1"))
    data = report(tmp_path)
    outcomes = data["requests"]["by_outcome"]
    assert outcomes.get("throttled", 0) >= 1, done.stdout + done.stderr
    assert not {"server_error", "stream_error", "truncated"} & set(outcomes)
    assert data["verdict"] == "pass"


def test_a_killed_engine_is_timed_death_and_later_requests_are_unreachable(vllm_model, tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "loadrepro", "run", "--profile", "vllm-engine-kill", "--out", str(out), "--quiet",
         "--engine-cmd", command(vllm_model, "--max-num-seqs", "8")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    pid = None
    try:
        while pid is None:
            line = process.stderr.readline()
            assert line, "loadrepro ended before the engine started"
            found = re.search(r"\(pid (\d+)\)", line)
            pid = int(found.group(1)) if found else None
        until(lambda: (out / "requests.jsonl").exists() and len(list(read_jsonl(out / "requests.jsonl"))) >= 2, 300,
              "two records")
        killed_ns = time.perf_counter_ns()  # CLOCK_MONOTONIC: the same clock loadrepro's records use
        os.killpg(pid, signal.SIGKILL)
        process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1
    data = report(out)
    start = next(s["t_ns"] for s in read_jsonl(out / "samples.jsonl") if s["kind"] == "note" and s["source"] == "run")
    death = next(r for r in data["rules"] if r["name"] == "engine_death")
    died_at = float(re.search(r"engine died at ([\d.]+) s", death["detail"]).group(1))
    assert abs(died_at - (killed_ns - start) / 1e9) <= 2 * 0.5 + 0.1  # two health intervals (and rounding)
    assert "killed by SIGKILL" in death["detail"]
    assert data["requests"]["by_outcome"].get("unreachable", 0) >= 1
    assert data["health"]["post"] == "unreachable"
    save_example("vllm-engine-kill-report.md", (out / "report.md").read_text(), out.parent)


def test_a_kill_mid_soak_is_recovered_from_and_an_oversize_request_refused(vllm_model, tmp_path):
    """vLLM SIGKILLed mid-soak and started again by loadrepro: the requests cut meanwhile are the fault's, and its
    recovery is timed (vLLM takes as long to start again as to start: 20-40 s here). Before it, one request beyond
    max_model_len (vLLM will not start with a KV pool smaller than max_model_len, so that is also beyond anything it
    can hold) is refused cleanly without holding up the rest."""
    events = ('[{at_s=8, action="oversize", recover_within_s=15}, '
              '{at_s=15, action="kill", duration_s=2, recover_within_s=120}]')
    done = loadrepro("run", "--profile", "vllm-prefix-overrun", "--out", str(tmp_path), "--quiet",
                     "--engine-cmd", command(vllm_model, "--max-num-seqs", "8"),
                     "--set", "workload.conversations=400", "--set", "workload.prefix_tokens=300",
                     "--set", "workload.turn_tokens=50", "--set", "workload.max_tokens=32",
                     "--set", "load.arrival='poisson'", "--set", "load.rate=4.0", "--set", "load.concurrency=8",
                     "--set", "load.duration_s=75", "--set", "verdict.min_cache_hit=0.0",
                     "--set", f"chaos.events={events}")
    assert done.returncode == 0, done.stdout + done.stderr
    data = report(tmp_path)
    oversize, kill = data["chaos"]
    assert kill["recovered"] and kill["health_s"] is not None and kill["faulted"] >= 1, kill
    assert oversize["recovered"] and "was refused cleanly" in oversize["detail"], oversize
    assert "maximum context length is 16384 tokens" in oversize["detail"]
    outcomes = data["requests"]["by_outcome"]
    assert not {"truncated", "unreachable", "server_error", "stalled", "timeout"} & set(outcomes), outcomes
    log = (tmp_path / "engine.log").read_text()
    assert "===== loadrepro: killed at 15 s (chaos), started again =====" in log
    rebuilt_alike(tmp_path)  # the kill and the oversize request judged again from the run's files
    print(f"vLLM: kill {kill['detail']}\noversize {oversize['detail']}")


def test_offline_planning_with_the_models_own_tokenizer_matches_vllms_counts(vllm, vllm_model):
    profile = load_profile("vllm-prefix-overrun", ["workload.turns=2", "workload.conversations=3"])

    async def go():
        plan = await plan_workload(profile, LocalTokenizerCounter(vllm_model))
        async with Transport(vllm.url, timeout_s=60) as http:
            counter = await detect_counter(http, "tiny")
            return plan, [await counter.count_chat(r.payload()["messages"]) for r in plan.workload.requests]

    plan, counted = asyncio.run(go())
    assert plan.calibration.source.startswith("local tokenizer")
    for request, actual in zip(plan.workload.requests, counted):
        assert abs(actual - request.expected_prompt_tokens) <= TOLERANCE * request.expected_prompt_tokens


def test_an_anonymized_log_loads_vllms_prefix_cache_as_its_text_did(vllm, tmp_path):
    """An OpenAI log with private names, anonymized with vLLM's own /tokenize in its 32-token blocks, and both
    replayed on vLLM (its prefix cache reset before each): cached tokens request by request within one block."""
    import urllib.request

    from tests.trace_files import make_turns, openai_log

    turns = make_turns(seed=11, sessions=6, block=32)
    log = openai_log(turns, tmp_path / "prod-log.jsonl")
    anon = tmp_path / "anon.jsonl"
    done = loadrepro("trace", "anonymize", str(log), "-o", str(anon), "--block-tokens", "32", "--base-url", vllm.url)
    assert done.returncode == 0, done.stderr
    assert "lengths counted with POST /tokenize (vLLM)" in done.stdout
    cached, reuse = {}, {}
    for name, trace in (("text", log), ("anon", anon)):
        urllib.request.urlopen(urllib.request.Request(vllm.url + "/reset_prefix_cache", method="POST"), timeout=30)
        out = tmp_path / name
        done = loadrepro("run", "--profile", "trace-example", "--base-url", vllm.url, "--set",
                         f"workload.trace='{trace}'", "--set", "workload.trace_block_tokens=32", "--set",
                         "workload.trace_speed=4.0", "--out", str(out), "--quiet")
        assert done.returncode == 0, done.stdout + done.stderr
        cached[name] = {(r["conversation"], r["turn"]): r["cached_tokens"] for r in read_jsonl(out / "requests.jsonl")}
        reuse[name] = report(out)["workload"]["prefix_reuse"]
    print(f"vLLM prefix reuse: text {reuse['text']}, anonymized {reuse['anon']}; per request (text, anonymized): "
          + ", ".join(f"{k}: {cached['text'][k]}/{cached['anon'][k]}" for k in sorted(cached["text"])))
    assert cached["text"].keys() == cached["anon"].keys() and sum(cached["text"].values()) > 0
    assert all(abs(cached["text"][k] - cached["anon"][k]) <= 32 for k in cached["text"]), cached


def test_an_agent_trace_is_served_from_the_prefix_cache_as_its_hash_ids_say(vllm, tmp_path):
    """A WEKA agent trace (a tool round trip, subagents, a compaction) replayed on vLLM with prefix caching: each
    request's cached tokens are what its hash ids share with earlier requests, in vLLM's 32-token blocks, and the
    run's whole is trace inspect's cacheable share of it. The figures are printed for the record."""
    from tests.agent_trace_files import weka_trace, write_lines

    trace = write_lines(tmp_path / "agent.jsonl", [weka_trace()])
    inspected = loadrepro("trace", "inspect", str(trace), "--json")
    assert inspected.returncode == 0, inspected.stderr
    cacheable = json.loads(inspected.stdout)["cacheable_tokens"]
    subprocess.run(["curl", "-s", "-X", "POST", f"{vllm.url}/reset_prefix_cache"], check=False, timeout=30)
    done = loadrepro("run", "--profile", "trace-example", "--base-url", vllm.url, "--out", str(tmp_path / "run"),
                     "--set", f"workload.trace='{trace}'", "--set", "workload.trace_block_tokens=0", "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = report(tmp_path / "run")["request_table"]
    assert len(rows) == 7 and all(r["outcome"] == "ok" for r in rows)
    for r in rows:  # the planned share, less what falls in vLLM's last partial block, never more
        print(f"conversation {r['conversation']} turn {r['turn']}: "
              f"{r['shared_prefix_tokens']} shared as planned, {r['cached_tokens']} cached by vLLM")
        assert r["shared_prefix_tokens"] - 32 - 8 <= r["cached_tokens"] <= r["shared_prefix_tokens"] + 8, r
    cached = sum(r["cached_tokens"] for r in rows)
    print(f"trace inspect: {cacheable} cacheable; vLLM cached {cached}")
    assert abs(cached - cacheable) <= 32 * len(rows)
