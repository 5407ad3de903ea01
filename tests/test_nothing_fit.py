"""A run in which not one request fit the target tested nothing: rule nothing_fit fails it and `run` exits 2 (the
profile does not fit this target, not the engine's failure), having said so before the load; `--fit` scales the
workload to what the target publishes. Must fire: every prompt beyond the context a stub publishes in /props, each
refused. Must not: some requests fit and the others are refused as they should be; a run whose refusals are a fault's
on purpose (oversize); the same workload with --fit."""

from __future__ import annotations

import json
import sys
import tomllib

import pytest

from loadrepro.config.capacity import EngineLimits
from loadrepro.config.profile_files import load_profile
from loadrepro.errors import UsageError
from loadrepro.runs.sizing import FIT_SHARE, fitted, longest_request
from loadrepro.workload.export import WORKLOAD_FILE, open_workload
from tests.context_server import ContextServer
from tests.helpers import cli, facts, fired, report, small
from tests.vllm_limits_server import VllmLimitsServer

N_CTX = 150  # shorter than every prompt of SMALL (200-token prefixes)
TURNS = ("workload.turns=3", "workload.turn_tokens=60", "workload.max_tokens=4")


def test_a_run_where_no_request_fits_the_published_context_exits_2_having_said_so_before(tmp_path):
    server = ContextServer(N_CTX, refuses=True)
    with server.running():
        done = cli("run", "--base-url", server.url, "--out", str(tmp_path / "run"), *small())
    found = report(tmp_path / "run")
    assert done.returncode == 2 and found["verdict"] == "fail", (done.returncode, fired(found))
    said = facts(found, "nothing_fit")
    assert (said["refused"], said["requests"], said["context_tokens"]) == (3, 3, N_CTX), said
    assert said["largest_tokens"] > N_CTX, said
    said_before = done.stderr[done.stderr.index("fit: none of the"):]  # said before the load, with the fix
    assert "--fit" in said_before and "load" not in said_before.partition("\n")[0][:0], done.stderr
    assert "verdict: FAIL" in done.stdout and "rerun with --fit" in done.stdout, done.stdout
    assert any(n.startswith("fit: none of the 6 planned requests") for n in found["notes"]), found["notes"]
    rebuilt = cli("report", str(tmp_path / "run"))  # one exit for the run and its rebuilt report
    assert rebuilt.returncode == 2 and report(tmp_path / "run")["verdict"] == "fail", rebuilt.stdout + rebuilt.stderr


def test_a_run_where_some_requests_fit_and_the_others_are_refused_is_judged_as_before(tmp_path):
    server = ContextServer(250, refuses=True)  # the first turns (about 200 tokens) fit, the later ones do not
    with server.running():
        done = cli("run", "--base-url", server.url, "--out", str(tmp_path / "run"), "--quiet", *small(*TURNS))
    found = report(tmp_path / "run")
    rules = fired(found)
    assert done.returncode == 0 and "nothing_fit" not in rules and "rejections" in rules, rules
    assert any(n.startswith("fit: only 3 of the 9 planned requests") for n in found["notes"]), found["notes"]


def test_fit_scales_the_workload_to_the_published_context_and_says_what_changed(tmp_path):
    longer = (*TURNS, "workload.turn_tokens=120")  # third turns of about 520 tokens: refused without --fit
    server = ContextServer(300, refuses=True)
    with server.running():
        done = cli("run", "--base-url", server.url, "--out", str(tmp_path / "run"), "--quiet", "--fit",
                   *small(*longer))
    assert done.returncode == 0, done.stderr[-2000:]
    found = report(tmp_path / "run")
    assert found["requests"]["by_outcome"] == {"ok": 9}, (done.stdout, found["requests"])
    note = next(n for n in found["notes"] if n.startswith("fit: scaled"))
    assert "the 300 tokens a request may have" in note and "prefix_tokens 200 -> " in note, note
    ran = tomllib.loads((tmp_path / "run" / "profile.toml").read_text())["workload"]
    assert ran["prefix_tokens"] < 200 and ran["turn_tokens"] < 120 and ran["turns"] == 3, ran
    assert ran["prefix_tokens"] + 2 * (ran["turn_tokens"] + 40) + ran["max_tokens"] <= FIT_SHARE * 300, ran


def test_fit_needs_a_published_limit_and_is_one_sizing_of_two():
    done = cli("run", "--fit", "--size-to-overrun", "2", "--profile", "quickstart")
    assert done.returncode == 2 and "--size-to-overrun" in done.stderr, done.stderr


def test_fit_keeps_the_shape_of_the_readme_profile_on_a_2048_token_slot():
    profile = load_profile("dsa-prefix-shared")
    scaled, said = fitted(profile, None, (2048, "n_ctx per slot in llama.cpp's /props"))
    w = scaled.workload
    assert longest_request(w) <= FIT_SHARE * 2048 and w.turns == 2 and w.conversations == 12, w
    assert w.prefix_tokens > w.max_tokens > w.warm_max_tokens and w.turn_tokens >= 16, w
    assert said.startswith("fit: scaled to the 2,048 tokens a request may have") and "max_tokens 32,768 -> " in said


def test_fit_binds_to_the_kv_pool_when_it_is_smaller_than_the_longest_sequence():
    limits = EngineLimits("vLLM vllm:cache_config_info", 16, 64, 8192)  # a pool of 1,024 tokens
    scaled, said = fitted(load_profile("dsa-prefix-shared"), limits, (8192, "max_model_len in /v1/models"))
    assert longest_request(scaled.workload) <= FIT_SHARE * 1024 and "KV pool of 1,024 tokens" in said, said


def test_fit_says_nothing_changed_when_the_profile_already_fits_and_refuses_a_context_too_small():
    profile = load_profile("dsa-prefix-shared")
    same, said = fitted(profile, None, (1_000_000, "max_model_len in /v1/models"))
    assert same == profile and said.endswith("nothing changed"), said
    with pytest.raises(UsageError, match="too small"):
        fitted(profile, None, (120, "n_ctx per slot in llama.cpp's /props"))
    with pytest.raises(UsageError, match="publishes none"):
        fitted(profile, None, None)


def test_an_output_cap_beyond_vllms_longest_sequence_refused_every_time_tested_nothing(tmp_path):
    """vLLM refuses prompt + max_tokens beyond max_model_len: prompts that fit with answers that do not."""
    server = VllmLimitsServer(1024)
    with server.running():
        done = cli("run", "--base-url", server.url, "--out", str(tmp_path / "run"), "--quiet",
                   *small("workload.max_tokens=2000", "workload.warm_max_tokens=2000"))
    found = report(tmp_path / "run")
    assert done.returncode == 2 and server.refused == 3 and "nothing_fit" in fired(found), fired(found)
    assert "capacity_mismatch" not in fired(found), fired(found)  # refused as the KV arithmetic says


@pytest.mark.parametrize("beyond,mismatch", [("clamp", False), ("serve", True)])
def test_an_answer_cut_at_the_context_is_no_capacity_mismatch_and_one_served_past_it_is(tmp_path, beyond, mismatch):
    """Prompts that fit max_model_len with answers that do not: an engine that cuts the answer where its context
    ends admitted only what it holds (no finding, the run passes); one that serves the whole answer past its own
    longest sequence disagrees with its published limits (capacity_mismatch)."""
    server = VllmLimitsServer(1024, beyond=beyond)
    with server.running():
        done = cli("run", "--base-url", server.url, "--out", str(tmp_path / "run"), "--quiet",
                   *small("workload.max_tokens=2000", "workload.warm_max_tokens=2000"))
    found = report(tmp_path / "run")
    assert server.refused == 0 and set(found["requests"]["by_outcome"]) == {"ok"}, found["requests"]
    assert ("capacity_mismatch" in fired(found)) is mismatch and "nothing_fit" not in fired(found), fired(found)
    assert done.returncode == (1 if mismatch else 0), (done.returncode, fired(found))


def test_a_dry_run_says_before_the_load_what_the_run_would_and_fits_with_fit(tmp_path):
    """run --dry-run shows what the run would do: the warning that none of the planned requests fit the target,
    and with --fit the workload scaled to it (its prompts within the context) and no warning; nothing is sent."""
    server = ContextServer(N_CTX, refuses=True)
    with server.running():
        plain = cli("run", "--base-url", server.url, "--dry-run", *small())
        fit = cli("run", "--base-url", server.url, "--dry-run", "--fit", "--out", str(tmp_path / "dry"), *small())
    assert plain.returncode == 0 and "fit: none of the 6 planned requests fit the target" in plain.stderr, plain.stderr
    assert fit.returncode == 0 and "fit: scaled to" in fit.stderr and "fit: none" not in fit.stderr, fit.stderr
    with open_workload(tmp_path / "dry" / WORKLOAD_FILE) as lines:
        rows = [json.loads(line) for line in lines if json.loads(line)["type"] == "request"]
    assert rows and all(r["expected_prompt_tokens"] + r["max_tokens"] <= N_CTX for r in rows), rows


def test_a_dry_run_that_starts_no_engine_says_it_could_not_check_the_fit():
    done = cli("run", "--dry-run", "--fit", *small())
    assert done.returncode == 0 and "fit: not checked" in done.stderr and "--fit and --size-to-overrun not applied" \
        in done.stderr, done.stderr


@pytest.mark.parametrize(("flags", "warned"), [("-np 4", None), ("", "no -np/--parallel in the engine command"),
                                               ("-np 4 -kvu", "-kvu in the engine command")])
def test_fit_warns_of_a_shared_llamacpp_pool_only_when_the_engine_command_may_share_one(tmp_path, flags, warned):
    engine = f"{sys.executable} -m tests.kv_pool_server --host 127.0.0.1 --port {{port}} --pool 400 {flags}"
    done = cli("run", "--engine-cmd", engine, "--out", str(tmp_path / "run"), "--quiet", "--fit",
               *small(*TURNS, "load.concurrency=3"))
    note = next(n for n in report(tmp_path / "run")["notes"] if n.startswith("fit: "))
    assert done.returncode == 0 and "n_ctx per slot" in note, (done.stderr[-2000:], note)
    shared = "share one KV pool" in note
    assert shared == (warned is not None) and (warned is None or warned in note), note
    assert "does not publish whether" not in note, note  # the command was known: said from it, not guessed
