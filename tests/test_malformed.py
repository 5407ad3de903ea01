"""Bad input on purpose ([[chaos.events]] action = "malformed"): an engine that refuses every kind with a 4xx and
keeps serving passes; one that dies on bytes that are not UTF-8, or hangs after broken JSON, fails bad_input_crash
naming the kind that did it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

import loadrepro
from loadrepro.load.malformed import KINDS, body
from tests.bad_input_server import BadInputServer
from tests.helpers import fired, rebuilt_alike, report, until

PROFILE = """
name = "malformed"
api = "chat"
[workload]
seed = 3
conversations = 60
turns = 1
prefix_tokens = 200
max_tokens = 4
[load]
arrival = "poisson"
rate = 10.0
concurrency = 4
duration_s = 4
stall_timeout_s = 3
request_timeout_s = 10
[watch]
metrics_path = ""
health_interval_s = 0.25
[[chaos.events]]
at_s = 1
action = "malformed"
count = 1
recover_within_s = 2
"""


def run(tmp_path, tokenizer_dir, mode: str):
    path = tmp_path / "malformed.toml"
    path.write_text(PROFILE)
    with BadInputServer(mode).running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    return server, report


def test_each_kind_is_what_it_says():
    import json

    with pytest.raises(UnicodeDecodeError):
        body("invalid_utf8", "chat", "m").decode("utf-8")
    with pytest.raises(json.JSONDecodeError):
        json.loads(body("bad_json", "chat", "m"))
    assert not isinstance(json.loads(body("wrong_types", "chat", "m"))["messages"], list)
    assert len(body("huge_body", "chat", "m")) > 4_000_000
    assert json.loads(body("negative_max_tokens", "chat", "m"))["max_tokens"] < 0
    named = {json.loads(body(k, "chat", "m"))["model"] for k in ("wrong_types", "huge_body", "negative_max_tokens")}
    assert named == {"m"}  # the run's model: an engine refuses an unknown one before reading the rest


def test_an_engine_that_refuses_every_kind_and_keeps_serving_passes(tmp_path, tokenizer_dir):
    server, report = run(tmp_path, tokenizer_dir, "refuses")
    assert report.passed, report
    assert sorted(server.refused) == sorted(["invalid UTF-8", "invalid JSON", "wrong types",
                                             "max_tokens must be at least 1"])  # huge_body: aiohttp's own 413
    [row] = report.chaos
    assert row.action == "malformed" and row.recovered, row
    for kind in KINDS:
        assert f"{kind}: HTTP 4" in row.detail, row.detail
    assert fired(report).get("bad_input_crash") is None


@pytest.mark.slow
def test_an_engine_that_dies_on_invalid_utf8_fails_naming_it(tmp_path, tokenizer_dir):
    server, report = run(tmp_path, tokenizer_dir, "dies_on_utf8")
    assert server.dead and not report.passed
    words = fired(report).get("bad_input_crash")
    assert words and re.search(r"malformed input at 1\.\d s: invalid_utf8: HTTP 500 .*; /health not 200 after it",
                               words), words


@pytest.mark.slow
def test_an_engine_that_hangs_after_broken_json_fails_naming_it(tmp_path, tokenizer_dir):
    server, report = run(tmp_path, tokenizer_dir, "hangs_on_bad_json")
    assert server.hung and not report.passed
    words = fired(report).get("bad_input_crash")
    assert words and re.search(r"malformed input at 1\.\d s: bad_json: no answer \(nothing within 15 s\)", words), \
        words


def test_an_engine_that_answers_broken_json_with_a_500_and_keeps_serving_is_warned_of_not_failed(tmp_path,
                                                                                               tokenizer_dir):
    """A wrong status is not a crash: llama.cpp answers broken JSON with HTTP 500 and serves on."""
    server, report = run(tmp_path, tokenizer_dir, "500_on_bad_json")
    assert report.passed, report
    words = fired(report).get("bad_input_crash")
    assert words and words.startswith("warning: ") and "bad_json: HTTP 500" in words, words
    assert "invalid_utf8" not in words


def test_an_engine_that_answers_broken_json_with_a_500_and_dies_a_moment_later_fails_naming_it(tmp_path,
                                                                                             tokenizer_dir):
    """vLLM 0.25.1 answered a bad grammar with a 500 and exited half a second later: its /health, asked at once,
    still said 200. /health is watched for a while after an answer that is not a 4xx, so the death is the kind's."""
    path = tmp_path / "malformed.toml"
    path.write_text(PROFILE.replace("count = 1", 'count = 1\nkind = "bad_json"'))
    with BadInputServer("dies_after_500").running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    assert server.dead and not report.passed
    words = fired(report).get("bad_input_crash")
    assert words and not words.startswith("warning: ") and \
        re.search(r"bad_json: HTTP 500 .*; /health not 200 after it", words), words
    rebuilt_alike(tmp_path / "run")


@pytest.mark.slow
def test_a_grammar_that_kills_the_engine_after_a_structured_request_fails_naming_it(tmp_path, tokenizer_dir):
    """bad_grammar, named: a server that, as vLLM 0.25.1, dies of a grammar that defines its root twice once a
    choice request has set its grammar backend up fails; the same server refusing it before that passes."""
    # 16 tokens: requests for fewer are never asked for a structured answer
    latched = PROFILE.replace("max_tokens = 4", 'max_tokens = 16\nstructured_share = 1\nstructured_format = "choice"')
    latched = latched.replace("count = 1", 'count = 1\nkind = "bad_grammar"')
    path = tmp_path / "grammar.toml"
    path.write_text(latched)
    with BadInputServer("latches_grammar").running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "latched")
    assert server.dead and not report.passed
    detail = fired(report).get("bad_input_crash")
    assert detail is not None and "bad_grammar: HTTP 500" in detail, report.reasons
    path.write_text(latched.replace('structured_format = "choice"', 'structured_format = "json_object"'))
    with BadInputServer("latches_grammar").running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "refused")
    assert not server.dead and report.passed, report.reasons
    assert server.refused == ['Rule "root" is defined multiple times']
    assert "bad_grammar: HTTP 400" in report.chaos[0].detail


@pytest.mark.slow
def test_an_engine_loadrepro_started_that_exits_on_malformed_input_ends_the_run_at_its_death(tmp_path,
                                                                                             tokenizer_dir):
    """llama.cpp 0.3.7 aborted on a body that is not UTF-8, and the run then waited out every malformed request's
    recover_within_s (nine minutes) on a dead engine. An engine whose process exited is gone: the rest are not sent,
    no wait goes on, and the run ends at the death, long before one recover_within_s (60 s) or the soak's end."""
    path = tmp_path / "malformed.toml"
    path.write_text(PROFILE.replace("duration_s = 4", "duration_s = 60").replace("recover_within_s = 2",
                                                                               'recover_within_s = 60\nkind = "all"'))
    engine = f"{sys.executable} -m tests.bad_input_server --port {{port}} --mode exits_on_utf8"
    report = loadrepro.run(path, engine_cmd=engine, tokenizer=tokenizer_dir, out=tmp_path / "run")
    assert not report.passed and report.stop_reason == "engine_death", report.reasons
    words = fired(report)
    assert "engine_death" in words and "invalid_utf8: no answer" in words["bad_input_crash"], words
    [row] = report.chaos
    assert not row.recovered and "not sent, the engine having stopped answering: bad_json x1" in row.detail, row
    # at the death, not 60 s of waiting later: the row says the run ended before the fault's window did
    assert "not back before the run ended" in row.detail and "within 60 s" not in row.detail, row


@pytest.mark.slow
def test_sigterm_while_a_fault_waits_on_a_hung_engine_writes_the_report_and_exits_130(tmp_path, tokenizer_dir):
    """A fault waiting for an answer that never comes (broken JSON hung the engine) is cancelled by SIGTERM: the run
    ends at once with its report."""
    path = tmp_path / "malformed.toml"
    path.write_text(PROFILE.replace("duration_s = 4", "duration_s = 60"))
    with BadInputServer("hangs_on_bad_json").running() as server:
        process = subprocess.Popen([sys.executable, "-m", "loadrepro", "run", "--profile", str(path), "--base-url",
                                    server.url, "--tokenizer", str(tokenizer_dir), "--out", str(tmp_path / "run"),
                                    "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            until(lambda: server.hung or process.poll() is not None, 60, "the engine hung by broken JSON")
            sent = time.monotonic()
            process.send_signal(signal.SIGTERM)
            process.wait(30)
            took = time.monotonic() - sent
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 130 and took < 2.0, (process.returncode, took, process.stderr.read()[-1000:])
    assert report(tmp_path / "run")["stop_reason"] == "interrupted"


def test_requests_answered_alike_are_said_once_with_their_count(tmp_path, tokenizer_dir):
    from loadrepro.judge.findings import grouped

    assert grouped(["a", "b", "a", "a"]) == ["a (x3)", "b"]
    path = tmp_path / "malformed.toml"
    path.write_text(PROFILE.replace("count = 1", 'count = 4\nkind = "invalid_utf8"'))
    with BadInputServer("refuses").running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    [row] = report.chaos
    assert server.refused == ["invalid UTF-8"] * 4 and report.passed, report.reasons
    assert row.detail.count("invalid_utf8: HTTP 400") == 1 and "BadRequestError\"}}) (x4)" in row.detail, row.detail


def sent(mode: str, kinds, count: int):
    """send_malformed against a BadInputServer in `mode`: what each got, and how many /health polls it made."""
    import asyncio

    import aiohttp

    from loadrepro.load.malformed import send_malformed

    polls = 0

    async def go(url: str):
        async with aiohttp.ClientSession() as session:
            async def healthy() -> bool:
                nonlocal polls
                polls += 1
                async with session.get(f"{url}/health") as response:
                    return response.status == 200

            return await send_malformed(url, "chat", "bad", None, tuple(kinds), count, healthy)

    with BadInputServer(mode).running() as server:
        done = asyncio.run(go(server.url))
    return done.refusals, done.unanswered, polls


def test_answers_not_a_4xx_are_watched_after_once_per_kind_not_after_each_request():
    """llama.cpp answers every broken JSON with a 500 and serves on: /health was watched for 3 s after each of the
    8 requests of the kind by default, and the run idled most of a minute after its load. Watched once after the last
    of the kind (3 s, polled every 0.25 s), and asked once after each of the others."""
    from loadrepro.load.malformed import SETTLE_POLL_S, SETTLE_S

    refusals, unsent, polls = sent("500_on_bad_json", ["bad_json"], 8)
    assert [r.status for r in refusals] == [500] * 8 and unsent == "", refusals
    assert all(r.healthy_after for r in refusals)
    assert polls <= 7 + SETTLE_S / SETTLE_POLL_S + 2, polls


def test_an_engine_that_dies_a_moment_after_a_500_is_still_the_kinds_doing_with_the_next_kind_sent_after():
    """vLLM 0.25.1's way: a 500, then dead half a second later. The kind's last request is watched for long enough
    that the next kind is not sent into (and blamed for) the death."""
    refusals, unsent, _ = sent("dies_after_500", ["bad_json", "wrong_types"], 3)
    culprit = next(r for r in refusals if r.crashed)
    assert culprit.kind == "bad_json" and "wrong_types" in unsent, (refusals, unsent)


def test_a_malformed_request_a_kill_on_purpose_met_is_the_kills_not_a_crash():
    """A kill on purpose while malformed requests are being sent: the one in flight when it struck got no answer,
    which is the kill's doing, not the kind's (not judged, said); the next waits until the kill is over."""
    import asyncio
    import time

    from aiohttp import web

    from loadrepro.load.malformed import Meanwhile, send_malformed
    from loadrepro.records import FaultSpan, FaultSpans
    from tests.stub_server import serving

    spans = FaultSpans()
    got: list[float] = []

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        got.append(time.perf_counter_ns())
        if len(got) == 2:  # the kill strikes as the second arrives: no answer, and the engine down for 0.5 s
            kill = FaultSpan("kill", time.perf_counter_ns())
            spans.spans.append(kill)
            asyncio.get_running_loop().call_later(0.5, lambda: setattr(kill, "over_ns", time.perf_counter_ns()))
            assert request.transport is not None
            request.transport.abort()
            await asyncio.sleep(1)
        return web.json_response({"error": {"message": "bad"}}, status=400)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)

    async def healthy() -> bool:
        return not spans.going_on()

    with serving(app) as url:
        done = asyncio.run(send_malformed(url, "chat", "m", None, ("bad_json",), 3, healthy,
                                          meanwhile=Meanwhile(spans)))
    assert [r.status for r in done.refusals] == [400, 400] and not any(r.crashed for r in done.refusals), done
    assert (done.unanswered, done.after_load, done.met) == ("", "", "bad_json x1")
    assert got[2] >= spans.spans[0].over_ns  # the third sent once the kill was over


@pytest.mark.slow
def test_malformed_requests_are_not_sent_after_the_load_and_a_watch_going_on_then_is_waited_for_and_said(
        tmp_path, tokenizer_dir):
    """Broken JSON answered with a 500 near the load's end: its kind's 3 s watch of /health outlasts the load, and
    the run waits for it, saying so, rather than lengthening the run unsaid; the kinds after it are not sent."""
    path = tmp_path / "malformed.toml"
    path.write_text(PROFILE.replace("at_s = 1", "at_s = 3.5").replace("count = 1", 'count = 8\nkind = "all"'))
    with BadInputServer("500_on_bad_json").running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    assert report.passed, report.reasons
    [row] = report.chaos
    assert "bad_json: HTTP 500" in row.detail and row.faulted == 0, row
    assert "not sent, the load having ended: wrong_types x8, huge_body x8, negative_max_tokens x8" in row.detail, row
    waited = [n for n in report.notes if "waited" in n and "after the load for the malformed at 3.5 s" in n]
    assert waited, report.notes
    assert report.duration_s < 4 + 3 + 3, report.duration_s  # one 3 s watch, not one after each of the 8
