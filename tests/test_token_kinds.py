"""Tokens of every kind are tokens: reasoning and tool-call deltas start the clock of the first token; content has
its own first-token time. Served by test servers that stream like reasoning models and tool-calling models do."""

import asyncio
import time

import pytest

import loadrepro
from loadrepro.load.client import Client, ClientConfig
from loadrepro.records import Outcome
from loadrepro.sim.config import sim_config
from loadrepro.sim.serve import sim_in_thread
from loadrepro.workload.model import PlannedRequest
from tests.examples import save_example
from tests.stub_server import StubServer

BODY = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
        "max_tokens": 8, "max_completion_tokens": 8, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}}
TOLERANCE_NS = 300_000_000  # a busy 2-core machine may read a chunk this much after the server wrote it; the
# reasoning lasts a second, so a first token read from the content would still be caught


def send(url: str, api: str = "chat", model: str = "stub", stream: bool = True):
    async def go():
        async with Client(ClientConfig(url, api, model, 4, 30, 10, max_backoff_s=0.05)) as client:
            return await client.send(1, PlannedRequest(0, 1, {**BODY, "stream": stream}, 8, 5, 0),
                                     time.perf_counter_ns(), time.time(), lambda r: None)

    return asyncio.run(go())


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_reasoning_first_stream_is_timed_from_its_first_reasoning_token(field):
    with StubServer("reasoning", tokens=5, reasoning_field=field, reasoning_s=1.0).running() as server:
        record = send(server.url)
    first, content = server.stats.first_token_sent_ns[0], server.stats.first_content_sent_ns[0]
    assert record.outcome is Outcome.OK, record
    assert first <= record.first_token_ns <= first + TOLERANCE_NS
    assert content <= record.first_content_ns <= content + TOLERANCE_NS
    assert record.first_content_ns - record.first_token_ns >= 900_000_000  # a second of reasoning in between
    assert len(record.chunk_ns) == 10 and record.completion_tokens == 10  # reasoning chunks are token chunks


def test_a_tool_call_stream_is_ok_and_its_arguments_are_tokens():
    with StubServer("tool_calls", token_delay_s=0.05).running() as server:
        record = send(server.url)
    first = server.stats.first_token_sent_ns[0]
    assert record.outcome is Outcome.OK and record.finish_reason == "tool_calls", record
    assert first <= record.first_token_ns <= first + TOLERANCE_NS
    assert record.first_content_ns is None  # no content at all: a tool call is the whole answer
    assert len(record.chunk_ns) == 4  # the name, then three argument fragments


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("stream", [True, False])
def test_the_simulated_engine_streams_reasoning_first_in_every_api(api, stream):
    with sim_in_thread(sim_config("healthy", reasoning_tokens=3, step_s=0.02)) as sim:
        record = send(sim.url, api, "loadrepro-sim", stream)
    assert record.outcome is Outcome.OK and record.detail == "", record
    assert record.completion_tokens == 8 and record.prompt_tokens and record.cached_tokens == 0
    if stream:
        assert len(record.chunk_ns) == 8
        # content is the fourth token chunk, after three reasoning steps (what the clock says of their length is
        # the event loop's: it may wake a timer a little early)
        assert record.chunk_ns.index(record.first_content_ns) == 3
    else:
        assert record.first_content_ns == record.first_token_ns


@pytest.mark.parametrize("code,outcome", [("429", Outcome.THROTTLED), ("503", Outcome.THROTTLED),
                                          (429, Outcome.THROTTLED),
                                          ("500", Outcome.STREAM_ERROR), ("upstream", Outcome.STREAM_ERROR)])
def test_an_error_code_in_a_stream_reads_alike_as_a_string_or_a_number(code, outcome):
    with StubServer("coded_error", error_code=code).running() as server:
        record = send(server.url)
    assert record.outcome is outcome and "upstream said no" in record.detail, record


def test_a_run_through_the_messages_api_against_a_thinking_engine_times_both_firsts(tmp_path):
    report = loadrepro.run("healthy", out=tmp_path, overrides=[
        "api='messages'", "sim.reasoning_tokens=8", "sim.step_s=0.01", "workload.conversations=3",
        "workload.max_tokens=24", "watch.canary_interval_s=0.5"])
    assert report.passed, report
    assert report.latency.ttfc_ms.p50 > report.latency.ttft_ms.p50
    rows = [r for r in report.request_table if r.turn > 1]  # the one-token warm-ups write only reasoning
    assert all(r.ttfc_ms > r.ttft_ms for r in rows), rows  # the gap's size is the test server's, above
    assert all(r.ttfc_ms is None for r in report.request_table if r.turn == 1)
    text = (tmp_path / "report.md").read_text()
    assert "| time to first content token |" in text and "Canaries:" in text
    save_example("reasoning-messages-report.md", text, tmp_path)
