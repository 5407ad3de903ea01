"""The simulated engine over a real loopback socket, driven with httpx."""

import asyncio
import contextlib
import json
import os
import re
import socket
import stat

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import until
from tests.sim.burst import PLANS, run_burst

SIGNATURES = {
    "draft-pool": r"Draft KV cache context resize failed for request \d+: could not resize to \d+ tokens"
                  r"|Failed to resume draft KV cache for request \d+",
    "page-index": r"User-provided base page indices is too short",
    "blocks-exhausted": r"Available blocks exhausted",
}
CHAT = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}


def metrics(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            pool = sample.labels.get("pool")
            values[f"{sample.name}[{pool}]" if pool else sample.name] = sample.value
    return values


@pytest.mark.parametrize("scenario", sorted(SIGNATURES))
def test_stock_dies_with_its_signature_everywhere(serve, scenario):
    sim = serve(scenario, "stock")
    results = asyncio.run(run_burst(sim.url, PLANS[scenario], timeout_s=30))
    signature = re.compile(SIGNATURES[scenario])
    failed = [r for r in results if not r.ok]
    assert failed and all(r.error and signature.search(r.error) for r in failed)
    health = httpx.get(f"{sim.url}/health")
    assert health.status_code == 503 and signature.search(health.text)
    later = httpx.post(f"{sim.url}/v1/chat/completions", json=CHAT)
    assert later.status_code == 500 and signature.search(later.json()["error"]["message"])
    log = sim.log_path.read_text()
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ERROR .*(" + SIGNATURES[scenario] + ")", log, re.M)
    assert metrics(sim.url)["loadrepro_sim:engine_dead"] == 1


@pytest.mark.parametrize("scenario", sorted(SIGNATURES))
def test_patched_serves_or_cleanly_rejects_the_same_burst(serve, scenario):
    sim = serve(scenario, "patched")
    results = asyncio.run(run_burst(sim.url, PLANS[scenario], timeout_s=30))
    assert len(results) >= PLANS[scenario].conversations
    for r in results:
        assert r.ok or (r.status == 400 and "Request requires" in (r.error or "")), r
    assert any(r.ok for r in results)
    assert httpx.get(f"{sim.url}/health").status_code == 200
    assert "ERROR" not in sim.log_path.read_text()


def test_healthy_reuses_the_shared_prefix_and_reports_it(serve):
    sim = serve("healthy")
    plan = PLANS["healthy"]
    results = asyncio.run(run_burst(sim.url, plan, timeout_s=30))
    assert all(r.ok for r in results)
    later_turns = [r for r in results if r.turn > 1]
    assert later_turns and all(r.cached_tokens >= plan.prefix_words for r in later_turns)
    values = metrics(sim.url)
    assert values["vllm:prefix_cache_hits_total"] >= plan.prefix_words * plan.conversations
    assert values["vllm:prefix_cache_queries_total"] > values["vllm:prefix_cache_hits_total"]
    assert values["vllm:num_requests_running"] == 0 and values["vllm:kv_cache_usage_perc"] == 0


def test_metrics_parse_and_use_vllm_names(serve):
    sim = serve("draft-pool")
    values = metrics(sim.url)
    for name in ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "loadrepro_sim:kv_blocks_total[primary]", "loadrepro_sim:kv_blocks_total[draft]",
                 "loadrepro_sim:kv_blocks_used[draft]"):
        assert name in values
    assert values["loadrepro_sim:kv_blocks_total[draft]"] == 512


def test_death_can_cut_streams_and_answer_400_like_tensorrt_llm(serve):
    sim = serve("blocks-exhausted", "stock", death_mode="cut", death_status=400)
    results = asyncio.run(run_burst(sim.url, PLANS["blocks-exhausted"], timeout_s=30))
    failed = [r for r in results if not r.ok]
    cut = [r for r in failed if "RemoteProtocolError" in r.error]
    assert cut  # streams open at the death are cut; requests sent after it get the 400 below
    assert all(r in cut or (r.status == 400 and "Available blocks exhausted" in r.error) for r in failed)
    later = httpx.post(f"{sim.url}/v1/chat/completions", json=CHAT)
    assert later.status_code == 400
    assert later.json()["object"] == "error" and later.json()["message"] == "Available blocks exhausted"


def test_stream_shape_usage_and_tokenize_agree(serve):
    sim = serve("healthy")
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    with httpx.stream("POST", f"{sim.url}/v1/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) == 4
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == 4
    counted = httpx.post(f"{sim.url}/tokenize", json={"messages": CHAT["messages"]}).json()
    assert counted["count"] == usage["prompt_tokens"] and counted["max_model_len"] == 131072


def test_completions_stream_and_non_stream(serve):
    sim = serve("healthy")
    whole = httpx.post(f"{sim.url}/v1/completions", json={"prompt": "one two three", "max_tokens": 3,
                                                          "ignore_eos": True}).json()
    assert whole["object"] == "text_completion" and whole["usage"]["completion_tokens"] == 3
    assert whole["usage"]["prompt_tokens"] == 3 and len(whole["choices"][0]["text"].split()) == 3
    with httpx.stream("POST", f"{sim.url}/v1/completions",
                      json={"prompt": "one two three", "max_tokens": 2, "stream": True}) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and json.loads(lines[-2][6:])["choices"][0]["finish_reason"]
    chat = httpx.post(f"{sim.url}/v1/chat/completions", json={**CHAT, "max_completion_tokens": 2}).json()
    assert chat["object"] == "chat.completion" and chat["usage"]["completion_tokens"] <= 2


@pytest.mark.parametrize("body,status,message", [
    (b"{not json", 400, "Invalid JSON body"),
    (b'{"max_tokens": 4}', 400, "messages: Field required"),
    (json.dumps({**CHAT, "max_tokens": 0}).encode(), 400, "max_tokens must be at least 1, got 0."),
    (json.dumps({**CHAT, "max_tokens": 10**12}).encode(), 400, "'max_tokens' or 'max_completion_tokens' is too large"),
    (json.dumps({**CHAT, "max_tokens": "many"}).encode(), 400, "max_tokens"),
    (json.dumps({"messages": [{"role": "user", "content": "x " * 140_000}], "max_tokens": 1}).encode(), 400,
     "This model's maximum context length is 131072 tokens"),
    (json.dumps({**CHAT, "model": "other"}).encode(), 404, "The model `other` does not exist."),
])
def test_bad_requests_get_openai_shaped_errors_and_harm_nothing(serve, body, status, message):
    sim = serve("healthy")
    response = httpx.post(f"{sim.url}/v1/chat/completions", content=body,
                          headers={"content-type": "application/json"})
    assert response.status_code == status
    assert message in response.json()["error"]["message"]
    assert httpx.get(f"{sim.url}/health").status_code == 200
    assert httpx.post(f"{sim.url}/v1/chat/completions", json=CHAT).status_code == 200


def test_client_disconnect_mid_stream_frees_the_blocks(serve):
    sim = serve("healthy")
    body = {"messages": [{"role": "user", "content": "word " * 3000}], "max_tokens": 20_000,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{sim.url}/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        while not next(lines).startswith("data: "):
            pass
        assert metrics(sim.url)["vllm:num_requests_running"] == 1
    until(lambda: metrics(sim.url)["vllm:num_requests_running"] == 0, 10, "the disconnected request freed")
    assert metrics(sim.url)["vllm:kv_cache_usage_perc"] == 0
    assert httpx.get(f"{sim.url}/health").status_code == 200


def test_models_and_sim_config(serve):
    sim = serve("page-index")
    models = httpx.get(f"{sim.url}/v1/models").json()
    assert models["data"][0]["id"] == "loadrepro-sim"
    config = httpx.get(f"{sim.url}/sim/config").json()
    assert config["page_index_entries"] == 68 and config["scenario"] == "page-index"


def _accepted_by_this_process(client: socket.socket) -> socket.socket:
    """The socket this process accepted for `client`'s connection (the sim serves on a thread here), as the kernel
    has it: found by its two addresses among this process's open descriptors."""
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if not stat.S_ISSOCK(os.fstat(int(fd)).st_mode):
                continue
            candidate = socket.socket(fileno=os.dup(int(fd)))
            if candidate.getsockname() == client.getpeername() and candidate.getpeername() == client.getsockname():
                return candidate
            candidate.close()
    raise AssertionError("no accepted socket for the connection")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads this process's descriptors from /proc")
def test_a_kept_alive_connection_sends_each_token_at_once(serve):
    # Without TCP_NODELAY a token written while the last is unacknowledged waits for the client's delayed ACK
    # (40 ms on Linux): on a kept-alive connection tokens then reach the client in bunches, TTFT grows by 40 ms and
    # the decode speed measured doubles, by which requests happened to reuse a connection.
    sim = serve()
    host, port = sim.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as client:
        client.sendall(b"GET /health HTTP/1.1\r\nHost: sim\r\n\r\n")
        assert client.recv(4096).startswith(b"HTTP/1.1 200")  # answered: accepted, and kept alive
        with _accepted_by_this_process(client) as accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
