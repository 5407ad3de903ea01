"""`loadrepro init llamacpp|vllm`: a starter profile written from a probe, sized to what the target publishes (a
request's context, llama.cpp's slots, vLLM's KV pool), every number commented; run as written, it fits its target."""

from __future__ import annotations

import tomllib

from loadrepro.config.profile_files import load_profile
from loadrepro.runs.sizing import FIT_SHARE, longest_request
from tests.context_server import ContextServer
from tests.helpers import cli, fired, report
from tests.vllm_limits_server import VllmLimitsServer


def test_a_llamacpp_starter_fits_its_slots_and_runs_clean(tmp_path):
    path = tmp_path / "starter.toml"
    with ContextServer(2048, refuses=True).running() as server:
        done = cli("init", "llamacpp", "--base-url", server.url, "-o", str(path))
        assert done.returncode == 0 and f"loadrepro run --profile {path}" in done.stdout, done.stderr
        ran = cli("run", "--profile", str(path), "--base-url", server.url, "--out", str(tmp_path / "run"), "--quiet")
    text = path.read_text()
    profile = load_profile(str(path))
    w = profile.workload
    assert w.conversations == profile.load.concurrency == 4 and "twice its 2 slots" in text, text
    assert 2 * longest_request(w) <= FIT_SHARE * 2048 and w.turns == 3, w  # its 2 slots' requests fit one pool
    assert "n_ctx per slot in /props" in text and "llama" not in profile.description.split("(")[1], text
    assert all(line.startswith("#") or "#" in line for line in text.splitlines()  # every number says why
               if "=" in line and line.split("=")[1].strip()[:1].isdigit()), text
    found = report(tmp_path / "run")
    assert ran.returncode == 0 and found["requests"]["by_outcome"] == {"ok": 12}, (ran.stdout, fired(found))


def test_a_vllm_starter_is_sized_to_a_pool_smaller_than_its_longest_sequence(tmp_path):
    with VllmLimitsServer(4096, block_size=16, num_gpu_blocks=64).running() as server:  # a pool of 1,024 tokens
        done = cli("init", "vllm", "--base-url", server.url)
    assert done.returncode == 0, done.stderr
    written = tomllib.loads(done.stdout)
    assert written["model"] == "tiny" and written["workload"]["conversations"] >= 3, written
    w = written["workload"]
    assert w["prefix_tokens"] + 2 * (w["turn_tokens"] + 40) + w["max_tokens"] <= FIT_SHARE * 1024, w
    assert "its whole KV pool of 1,024 tokens (vLLM vllm:cache_config_info)" in done.stdout, done.stdout


def test_init_names_the_engine_the_target_is_and_keeps_a_file_it_did_not_write(tmp_path):
    kept = tmp_path / "mine.toml"
    kept.write_text("# mine\n")
    with ContextServer(2048).running() as server:
        other = cli("init", "vllm", "--base-url", server.url)
        exists = cli("init", "llamacpp", "--base-url", server.url, "-o", str(kept))
    assert other.returncode == 2 and "is llama.cpp" in other.stderr and "loadrepro init llamacpp" in other.stderr
    assert exists.returncode == 2 and "--force" in exists.stderr and kept.read_text() == "# mine\n"


def test_a_vllm_starter_sends_more_than_its_pool_holds_at_once(tmp_path):
    with VllmLimitsServer(2048, block_size=16, num_gpu_blocks=1024).running() as server:  # 16,384 tokens
        done = cli("init", "vllm", "--base-url", server.url)
    assert done.returncode == 0, done.stderr
    written = tomllib.loads(done.stdout)
    w, n = written["workload"], written["workload"]["conversations"]
    longest = w["prefix_tokens"] + 2 * (w["turn_tokens"] + 40) + w["max_tokens"]
    assert n == written["load"]["concurrency"] and n * longest >= 1.5 * 16384 > 16384 // longest * longest, w
    assert f"holds {16384 // longest} of the longest requests at once; these {n} need" in done.stdout, done.stdout


def test_a_vllm_starter_says_when_its_pool_is_too_large_to_press(tmp_path):
    with VllmLimitsServer(2048, block_size=16, num_gpu_blocks=16384).running() as server:  # 262,144 tokens
        done = cli("init", "vllm", "--base-url", server.url)
    assert done.returncode == 0, done.stderr
    w = tomllib.loads(done.stdout)["workload"]
    longest = w["prefix_tokens"] + 2 * (w["turn_tokens"] + 40) + w["max_tokens"]
    assert w["conversations"] == 64 and longest == int(0.9 * 2048), w  # the prefix grew as far as a request may
    assert "so nothing waits" in done.stdout and "the others wait" not in done.stdout, done.stdout


def test_a_llamacpp_starter_on_slots_too_small_to_share_fits_one_slot_and_says_why(tmp_path):
    path = tmp_path / "starter.toml"
    with ContextServer(256, refuses=True).running() as server:  # half of 256 holds no conversation: -np 2's slots
        done = cli("init", "llamacpp", "--base-url", server.url, "-o", str(path))
        assert done.returncode == 0, done.stderr
        ran = cli("run", "--profile", str(path), "--base-url", server.url, "--out", str(tmp_path / "run"), "--quiet")
    w = load_profile(str(path)).workload
    assert w.conversations == 4 and 2 * longest_request(w) > FIT_SHARE * 256 >= longest_request(w), w
    assert "1/2 of it, for 2 slots sharing one pool" in path.read_text(), path.read_text()
    found = report(tmp_path / "run")["requests"]["by_outcome"]
    assert ran.returncode == 0 and found == {"ok": w.conversations * w.turns}, ran.stdout
