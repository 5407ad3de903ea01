"""Every outcome from the contract, produced over a real socket by a server that misbehaves on purpose."""

import asyncio
import socket
import time

import pytest

from loadrepro.load.client import Client, ClientConfig
from loadrepro.load.outcomes import outcome_for_status, outcome_for_stream_error
from loadrepro.records import Outcome
from loadrepro.workload.model import PlannedRequest
from tests.stub_server import StubServer, wait_until

BODY = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "max_completion_tokens": 8,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


def planned(**body) -> PlannedRequest:
    return PlannedRequest(0, 1, {**BODY, **body}, 8, 5, 0)


def send(url: str, request: PlannedRequest | None = None, stall_s: float = 2.0, timeout_s: float = 10.0,
         cancel_after: int | None = None, api_key: str | None = None):
    seen = []

    async def go():
        config = ClientConfig(url, "chat", "stub", 4, timeout_s, stall_s, api_key=api_key, max_backoff_s=0.05)
        async with Client(config) as client:
            return await client.send(7, request or planned(), time.perf_counter_ns(), time.time(), seen.append,
                                     cancel_after)

    record = asyncio.run(go())
    assert seen == [record]  # reported exactly once
    return record


@pytest.mark.parametrize("behaviour,outcome,detail", [
    ("ok", Outcome.OK, ""),
    ("reset", Outcome.TRUNCATED, "connection closed"),
    ("no_finish", Outcome.TRUNCATED, "before a finish reason"),
    ("malformed", Outcome.PROTOCOL_ERROR, "JSONDecodeError"),
    ("error_event", Outcome.STREAM_ERROR, "Failed to resume draft KV cache for request 3"),
    ("throttle", Outcome.THROTTLED, "slow down"),
    ("server_error", Outcome.SERVER_ERROR, "EngineCore encountered an issue"),
    ("fatal_400", Outcome.SERVER_ERROR, "Available blocks exhausted"),
    ("reject_400", Outcome.REJECTED, "maximum context length"),
    ("plain_json", Outcome.OK, ""),
])
def test_each_fault_maps_to_its_outcome(behaviour, outcome, detail):
    with StubServer(behaviour).running() as server:
        record = send(server.url)
    assert record.outcome is outcome, record
    assert detail in record.detail


def test_a_good_stream_is_timed_and_counted_from_usage():
    with StubServer("ok", tokens=6, token_delay_s=0.01, first_token_delay_s=0.05).running() as server:
        record = send(server.url)
    assert record.outcome is Outcome.OK and record.finish_reason == "length" and record.status == 200
    assert record.queued_ns <= record.sent_ns <= record.first_byte_ns <= record.first_token_ns <= record.end_ns
    assert record.first_token_ns - record.sent_ns >= 50_000_000
    assert len(record.chunk_ns) == 6 and list(record.chunk_ns) == sorted(record.chunk_ns)
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == (100, 6, 50)


def test_stalled_stream_and_stalled_headers_end_after_the_stall_timeout():
    """Stalled, not timed out: the stall timeout (0.5 s) ended it, well before the request's (10 times longer), and
    not before a whole stall timeout of silence."""
    for behaviour in ("hang", "hang_headers"):
        with StubServer(behaviour).running() as server:
            record = send(server.url, stall_s=0.5, timeout_s=5.0)
            assert record.outcome is Outcome.STALLED, (behaviour, record)
            silent_since = record.chunk_ns[-1] if record.chunk_ns else record.first_byte_ns or record.sent_ns
            assert record.end_ns - silent_since >= 0.5e9, (behaviour, record)


def test_overall_timeout_is_its_own_outcome():
    with StubServer("ok", tokens=50, token_delay_s=0.05).running() as server:
        record = send(server.url, stall_s=5, timeout_s=0.5)
    assert record.outcome is Outcome.TIMEOUT and len(record.chunk_ns) > 0


def test_refused_connection_is_unreachable():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    record = send(f"http://127.0.0.1:{port}")
    assert record.outcome is Outcome.UNREACHABLE and record.status is None


def test_throttled_requests_are_retried_before_they_count():
    with StubServer("throttle").running() as server:
        record = send(server.url)
        assert server.stats.requests == 4  # the first try and three retries
    assert record.retries == 3 and record.outcome is Outcome.THROTTLED


def test_cancel_after_chunks_closes_the_stream_and_the_server_sees_it():
    with StubServer("ok", tokens=40, token_delay_s=0.02).running() as server:
        record = send(server.url, cancel_after=3)
        assert wait_until(server.stats, lambda: server.stats.disconnects >= 1)
        assert server.stats.disconnects == 1
    assert record.outcome is Outcome.CANCELLED and len(record.chunk_ns) == 3


def test_non_streaming_requests_and_what_is_always_sent():
    with StubServer("ok").running() as server:
        record = send(server.url, planned(stream=False), api_key="sk-test")
        sent = server.stats.bodies[0]
    assert record.outcome is Outcome.OK and record.finish_reason == "stop"
    # a whole answer: its end to end latency, and no time to first token (no one can tell when its tokens came)
    assert not record.streamed and record.first_token_ns is None and record.ttft_ms is None and record.e2e_ms
    assert sent["model"] == "stub" and sent["max_tokens"] == 8 and sent["max_completion_tokens"] == 8
    assert sent["ignore_eos"] is True and sent["stream"] is False
    assert "sk-test" not in record.detail


@pytest.mark.parametrize("status,text,retry_after,outcome", [
    (400, "Generation failed: Available blocks exhausted", False, Outcome.SERVER_ERROR),
    (400, "This model's maximum context length is 8192 tokens", False, Outcome.REJECTED),
    (429, "", False, Outcome.THROTTLED),
    (503, "busy", True, Outcome.THROTTLED),
    (503, "LLM is unavailable", False, Outcome.SERVER_ERROR),
    (500, "", False, Outcome.SERVER_ERROR),
    (302, "", False, Outcome.PROTOCOL_ERROR),
])
def test_status_mapping_reads_the_text(status, text, retry_after, outcome):
    assert outcome_for_status(status, text, retry_after) is outcome


@pytest.mark.parametrize("text,code,outcome", [
    ("The engine is currently busy; try again later", 503, Outcome.THROTTLED),
    ("anything", 429, Outcome.THROTTLED),
    ("Failed to resume draft KV cache for request 3", 500, Outcome.STREAM_ERROR),
    ("Context size has been exceeded.", None, Outcome.STREAM_ERROR),
])
def test_errors_inside_a_stream_are_throttling_only_when_they_say_so(text, code, outcome):
    assert outcome_for_stream_error(text, code) is outcome


def send_together(url: str, count: int, stall_s: float, ttft_s: float = 0.0, timeout_s: float = 30.0):
    """`count` requests at once through one client, so that they share what the engine's progress is."""
    async def go():
        config = ClientConfig(url, "chat", "stub", count, timeout_s, stall_s, ttft_timeout_s=ttft_s)
        async with Client(config) as client:
            return await asyncio.gather(*(client.send(i, planned(), time.perf_counter_ns(), time.time(),
                                                      lambda r: None) for i in range(count)))
    return asyncio.run(go())


def test_waiting_for_a_turn_while_other_streams_progress_is_not_a_stall():
    # One stream at a time, 0.6 s each, headers at once: the fourth waits 1.8 s for its first token, far beyond
    # the 0.4 s stall timeout, while the others stream.
    with StubServer("queue", tokens=6, token_delay_s=0.1).running() as server:
        records = send_together(server.url, 4, stall_s=0.4)
    assert [r.outcome for r in records] == [Outcome.OK] * 4, [r.detail for r in records]
    waited = max((r.first_token_ns - r.sent_ns) / 1e9 for r in records)
    assert waited > 1.2


def test_the_wait_for_a_first_token_is_bounded_by_ttft_timeout():
    with StubServer("queue", tokens=6, token_delay_s=0.1).running() as server:
        records = send_together(server.url, 4, stall_s=0.4, ttft_s=0.9)
    outcomes = sorted(r.outcome for r in records)
    assert outcomes.count(Outcome.OK) == 2 and outcomes.count(Outcome.TIMEOUT) == 2, outcomes
    assert all("ttft_timeout_s" in r.detail for r in records if r.outcome is Outcome.TIMEOUT)


def test_an_engine_that_stops_all_progress_while_requests_wait_is_stalled():
    # The first stream stops after two tokens; the others got their headers and wait behind it: a deadlock.
    # Stalled, not timed out: the stall timeout ended them, well before the request's own (ten times longer).
    with StubServer("deadlock").running() as server:
        records = send_together(server.url, 3, stall_s=0.4, timeout_s=4.0)
    assert [r.outcome for r in records] == [Outcome.STALLED] * 3, [r.detail for r in records]
    assert sum("after its first token" in r.detail for r in records) == 1
    assert sum("no progress seen anywhere on the engine" in r.detail for r in records) == 2


def test_metrics_that_move_are_progress_and_waiting_gauges_are_not():
    from loadrepro.load.watch.metrics_scrapes import progressed as _moved

    before = {"kv_usage": 0.5, "waiting": 3.0, "running": 2.0, "prefix_cache_hits": 10.0}
    assert _moved(before, {**before, "kv_usage": 0.6}) and _moved(before, {**before, "prefix_cache_hits": 11.0})
    assert not _moved(before, {**before, "waiting": 4.0, "running": 1.0})
    assert not _moved(before, dict(before))


def test_odd_but_legal_sse_framing_is_read_like_any_stream():
    with StubServer("odd_framing").running() as server:
        record = send(server.url)
    assert record.outcome is Outcome.OK, record.detail
    assert len(record.chunk_ns) == 2 and record.finish_reason == "length" and record.prompt_tokens == 100


def test_credentials_in_the_url_and_an_api_key_do_not_clash():
    # aiohttp refuses a request with both an Authorization header and user:password in its URL: that must not
    # become the target's protocol error.
    with StubServer("ok").running() as server:
        url = server.url.replace("http://", "http://someone:secret@")
        assert send(url, api_key="sk-key").outcome is Outcome.OK
        assert send(url).outcome is Outcome.OK


def test_sse_comments_on_a_waiting_stream_keep_it_alive():
    # 1.2 s of ": ping" before the first token, nothing else progressing, a 0.5 s stall timeout: not a stall.
    with StubServer("pings").running() as server:
        record = send(server.url, stall_s=0.5)
    assert record.outcome is Outcome.OK, record.detail
    assert (record.first_token_ns - record.sent_ns) / 1e9 > 1.0


def test_a_whole_answer_longer_than_the_stall_timeout_is_not_a_stall():
    """A non-streamed request says nothing until its answer is whole: 1.2 s of silence beside a 0.4 s stall
    timeout, with no other stream moving, is its answer being made, judged by request_timeout_s alone; the same
    silence on a stream that asked for one is a stall."""
    with StubServer("ok", first_token_delay_s=1.2).running() as server:
        whole = send(server.url, planned(stream=False), stall_s=0.4)
        streamed = send(server.url, planned(), stall_s=0.4)
    assert whole.outcome is Outcome.OK, whole
    assert streamed.outcome is Outcome.STALLED, streamed


def test_a_whole_answer_beyond_the_request_timeout_is_a_timeout():
    with StubServer("ok", first_token_delay_s=3.0).running() as server:
        record = send(server.url, planned(stream=False), stall_s=0.4, timeout_s=1.0)
    assert record.outcome is Outcome.TIMEOUT and not record.streamed, record


def test_a_stream_whose_bytes_came_while_the_clients_loop_was_held_up_is_not_stalled():
    """A busy machine holds loadrepro's own event loop (here a callback that blocks it for 0.6 s, twice the stall
    timeout) while the engine goes on streaming: the stall timer and the bytes that came meanwhile are due at once,
    and the bytes are read before the request is judged. Stalled would be loadrepro's lag, not the engine's."""
    with StubServer("ok", tokens=20, token_delay_s=0.05).running() as server:
        async def go():
            config = ClientConfig(server.url, "chat", "stub", 1, 10.0, 0.3)
            async with Client(config) as client:
                asyncio.get_running_loop().call_later(0.2, time.sleep, 0.6)  # the loop held up: the subject here
                return await client.send(7, planned(), time.perf_counter_ns(), time.time(), lambda r: None)

        record = asyncio.run(go())
    assert record.outcome is Outcome.OK and len(record.chunk_ns) == 20, record
