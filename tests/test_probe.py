"""`loadrepro probe`: what loadrepro sees of an engine, against the simulated engine and a bare stub, over HTTP."""

import asyncio
import json

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loadrepro.cli.summary_lines import describe_probe
from loadrepro.load.probe import probe
from loadrepro.sim.config import sim_config
from loadrepro.sim.serve import sim_in_thread
from tests.context_server import ContextServer
from tests.examples import save_example
from tests.helpers import cli
from tests.stub_server import StubServer


def _prefix_hits(url: str) -> float:
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            if sample.name == "vllm:prefix_cache_hits_total":
                return sample.value
    raise AssertionError("no prefix cache counter")


def test_the_simulated_engine_is_seen_whole():
    with sim_in_thread(sim_config("page-index")) as sim:
        result = asyncio.run(probe(sim.url))
    assert result.flavour == "simulated engine" and any("/sim/config" in e for e in result.evidence)
    assert result.models == ["loadrepro-sim"] and result.max_model_len == 8192
    assert result.tokenize == "POST /tokenize (vLLM)"
    assert result.health.status == 200 and result.metrics.status == 200
    assert list(result.series) == ["KV usage", "waiting", "running", "preemptions", "prefix cache"]
    assert result.usage.streamed_usage and result.usage.cached_tokens >= 64  # the shared prefix's whole blocks
    assert result.limits.startswith("simulated engine /sim/config: 512 blocks x 32 tokens")
    assert result.generated_prompt_tokens == 2 * result.usage.prompt_tokens + sum(
        c.prompt_tokens for c in result.apis.values()) > 0
    assert any(line.startswith("prefix reuse: judged from cached_tokens") for line in result.plan)
    text = "\n".join(describe_probe(result))
    assert "engine          simulated engine" in text and "A run against this target:" in text


def test_probing_warms_no_prefix_a_later_request_could_use():
    """Each probe salts its prefix: a second probe's first request finds nothing cached from the first probe."""
    with sim_in_thread(sim_config("healthy")) as sim:
        first = asyncio.run(probe(sim.url))
        before = _prefix_hits(sim.url)
        second = asyncio.run(probe(sim.url))
        after = _prefix_hits(sim.url)
    assert first.usage.cached_tokens > 0
    assert after - before == second.usage.cached_tokens  # all of it on the second request: none on the first


def test_an_engine_with_nothing_extra_is_unknown_and_the_plan_says_what_is_lost():
    with StubServer("ok").running() as stub:
        result = asyncio.run(probe(stub.url))
    assert result.flavour == "unknown" and result.tokenize is None and result.series == {}
    assert result.metrics.status == 404 and result.limits is None
    plan = "\n".join(result.plan)
    assert "no tokenize endpoint answers" in plan and "--tokenizer PATH" in plan
    assert "nothing loadrepro recognises at /metrics" in plan and "give the profile's [engine] keys" in plan


def test_the_command_prints_json_and_a_table(tmp_path):
    with sim_in_thread(sim_config("draft-pool")) as sim:
        as_json = cli("probe", "--base-url", sim.url, "--json")
        table = cli("probe", "--base-url", sim.url)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["schema_version"] == "loadrepro.probe/1"
    assert table.returncode == 0 and "simulated engine" in table.stdout
    save_example("probe-simulated-engine.txt", "$ loadrepro probe --base-url http://127.0.0.1:PORT\n"
                 + table.stdout.replace(sim.url, "http://127.0.0.1:PORT"))


def test_an_unreachable_target_exits_1_naming_it():
    done = cli("probe", "--base-url", "http://127.0.0.1:9")
    assert done.returncode == 1 and "could not be reached" in done.stderr


def test_the_probe_lists_which_apis_answer_and_whether_streams_carry_reasoning():
    with sim_in_thread(sim_config("healthy", reasoning_tokens=2)) as sim:
        result = asyncio.run(probe(sim.url))
    assert list(result.apis) == ["chat", "completions", "responses", "messages"]
    assert all(c.answers for c in result.apis.values()), result.apis
    assert [api for api, c in result.apis.items() if c.reasoning] == ["chat", "responses", "messages"]
    assert "chat (reasoning first), completions, responses (reasoning first), messages (reasoning first) answer" in \
        "\n".join(describe_probe(result))
    with StubServer("ok").running() as stub:  # serves chat and completions only
        bare = asyncio.run(probe(stub.url))
    assert [api for api, c in bare.apis.items() if c.answers] == ["chat", "completions"]
    assert bare.apis["messages"].detail.startswith("rejected") and not bare.apis["chat"].reasoning


def test_a_llamacpp_server_without_metrics_is_told_the_flag_and_its_slot_context():
    with ContextServer(2048).running() as server:
        result = asyncio.run(probe(server.url))
    assert result.flavour == "llama.cpp" and result.metrics.status == 404 and result.max_model_len == 2048
    metrics = next(line for line in result.plan if line.startswith("metrics:"))
    assert "--metrics" in metrics, result.plan
    context = next(line for line in result.plan if line.startswith("context:"))
    assert "2,048 tokens a request (n_ctx per slot in /props)" in context and "--fit" in context, context
