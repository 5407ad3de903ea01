"""Speculative decoding as the engine reports it per request (llama.cpp's timings.draft_n and draft_n_accepted in
its last chunk): an engine whose later requests accept far fewer drafts than its early ones (llama.cpp #27852) fails
spec_acceptance_collapse; one whose acceptance holds does not, unless below [verdict] min_draft_acceptance; an engine
that drafts nothing has no speculative section. An engine that says it only in its /metrics counters (vLLM's
spec_decode_num_draft_tokens and _accepted_tokens) is judged over thirds of the time they grew in."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from tests.helpers import cli, rule, small
from tests.stub_server import chat_app, chunk_event, serving

DRAFTED = 20


def _engine(accepted_of, counters: bool = False) -> web.Application:
    """Streams 4 tokens; its last chunk's timings say DRAFTED drafted and accepted_of(n) accepted for its n-th
    answer (None: no speculation, no draft counts). `counters`: its /metrics count them instead, as vLLM's do, and
    each answer takes 0.12 s (the counters are scraped while they grow)."""
    answered, drafted, accepted_total = 0, 0, 0

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=f"vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {drafted}\n"
                                 f"vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {accepted_total}\n")

    async def chat(request: web.Request) -> web.StreamResponse:
        nonlocal answered, drafted, accepted_total
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(4):
            await asyncio.sleep(0.03 if counters else 0)
            await response.write(chunk_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                           "finish_reason": None}]}, "s"))
        accepted = accepted_of(answered)
        answered += 1
        if counters:
            drafted, accepted_total = drafted + DRAFTED, accepted_total + accepted
        timings = {"prompt_n": 10, "predicted_n": 4} | ({} if accepted is None or counters else {
            "draft_n": DRAFTED, "draft_n_accepted": accepted})
        await response.write(chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                                          "timings": timings}, "s"))
        await response.write(b"data: [DONE]\n\n")
        return response

    return chat_app("s", chat, web.get("/metrics", metrics))


def _run(tmp_path, accepted_of, *more: str, counters: bool = False) -> dict:
    with serving(_engine(accepted_of, counters)) as url:
        cli("run", "--profile", "healthy", "--base-url", url, *small("workload.conversations=6", *more),
            "--set", "load.concurrency=1", "--out", str(tmp_path), "--quiet")
    return json.loads((tmp_path / "report.json").read_text())


def test_acceptance_that_collapses_from_the_early_requests_to_the_late_fails(tmp_path):
    report = _run(tmp_path, lambda n: 17 if n < 6 else 2)  # 85%, then 10%: #27852's 86% to 11%
    found = rule(report, "spec_acceptance_collapse")
    assert found["fired"] and found["severity"] == "fail", found
    facts = found["facts"]
    assert facts["early"] == 0.85 and facts["late"] == 0.1 and facts["requests"] == 18  # 6 conversations of 3
    spec = report["speculative"]
    assert spec["draft_tokens"] == 18 * DRAFTED and spec["accepted_tokens"] == 6 * 17 + 12 * 2
    assert spec["per_request"][:7] == [0.85] * 6 + [0.1]


@pytest.mark.parametrize(("least", "fired"), [("0.0", False), ("0.9", True)])
def test_acceptance_that_holds_passes_unless_below_the_least_asked(tmp_path, least, fired):
    report = _run(tmp_path, lambda n: 16, f"verdict.min_draft_acceptance={least}")
    assert rule(report, "spec_acceptance_collapse")["fired"] is fired
    assert report["speculative"]["acceptance_rate"] == 0.8 and report["speculative"]["late_rate"] == 0.8


def test_an_engine_that_drafts_nothing_has_no_speculative_section(tmp_path):
    report = _run(tmp_path, lambda n: None)
    assert report["speculative"] is None and not rule(report, "spec_acceptance_collapse")["fired"]


def test_counters_in_metrics_that_collapse_fail_and_that_hold_pass(tmp_path):
    """18 answers, one at a time: the first 6 accept 85%, the rest 10%; the counters' early third of time is about the
    first 6 answers, their last third about the last 6 (bounds loose enough for a busy machine's uneven pace)."""
    report = _run(tmp_path / "collapse", lambda n: 17 if n < 6 else 2, "watch.metrics_interval_s=0.05", counters=True)
    spec, found = report["speculative"], rule(report, "spec_acceptance_collapse")
    assert spec["source"] == "metrics" and spec["requests"] == 0 and spec["per_request"] == [], spec
    assert spec["draft_tokens"] == 18 * DRAFTED and spec["accepted_tokens"] == 6 * 17 + 12 * 2, spec
    assert found["fired"] and found["facts"]["source"] == "metrics", found
    assert spec["early_rate"] >= 0.5 and spec["late_rate"] <= 0.2, spec
    held = _run(tmp_path / "held", lambda n: 16, "watch.metrics_interval_s=0.05", counters=True)
    assert held["speculative"]["acceptance_rate"] == 0.8 and not rule(held, "spec_acceptance_collapse")["fired"]
