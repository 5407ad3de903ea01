"""Length targets in the target's own tokens, calibrated over real HTTP against the simulated engine."""

import asyncio

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.load.transport import Transport
from loadrepro.sim.config import sim_config
from loadrepro.sim.serve import sim_in_thread
from loadrepro.workload.apis import PATHS
from loadrepro.workload.plan import plan_workload
from loadrepro.workload.probes import (
    MAX_PROBES,
    MAX_SHARE,
    ProbeBudget,
    calibrate_by_probes,
    probe_pool,
)
from loadrepro.workload.tokens import HttpTokenCounter, detect_counter
from tests.gateway_server import Gateway


async def plan_over_http(url: str, profile, flavour: str | None = None):
    async with Transport(url, timeout_s=60) as client:
        counter = await detect_counter(client, "loadrepro-sim") if flavour is None else \
            HttpTokenCounter(client, flavour, "loadrepro-sim")
        plan = await plan_workload(profile, counter)
        counted = []
        for request in plan.workload.requests:
            counted.append((request, await counter.count_chat(request.payload()["messages"])))
        return counter, plan, counted


def test_lengths_hit_targets_within_two_percent_on_the_targets_tokenizer():
    profile = load_profile("quickstart", ["workload.conversations=4", "workload.turns=3",
                                          "workload.prefix_tokens=6000"])
    with sim_in_thread(sim_config("healthy")) as sim:
        counter, plan, counted = asyncio.run(plan_over_http(sim.url, profile))
    assert counter.source == "POST /tokenize (vLLM)"
    assert not counter.local and plan.calibration.counted_records < 100  # a sample, not the whole pool
    assert plan.within_tolerance and plan.checks
    for request, actual in counted:
        assert abs(actual - request.expected_prompt_tokens) <= 0.02 * request.expected_prompt_tokens
    turn_one = [actual for request, actual in counted if request.turn == 1]
    assert all(abs(a - 6000) <= 120 for a in turn_one)


def test_probe_calibration_is_bounded_and_counts_no_run_prompt():
    profile = load_profile("quickstart", ["workload.conversations=4", "workload.turns=3",
                                          "workload.prefix_tokens=6000"])
    with sim_in_thread(sim_config("healthy")) as sim:
        counter, plan, counted = asyncio.run(plan_over_http(sim.url, profile, "probe"))
    planned = sum(r.expected_prompt_tokens for r in plan.workload.requests)
    assert counter.probing and plan.checks == ()  # no prompt of the run was counted on the target
    assert 0 < plan.probe_requests <= MAX_PROBES and 0 < plan.probe_tokens <= MAX_SHARE * planned
    assert f"{plan.probe_requests} salted probe requests, {plan.probe_tokens} tokens" in plan.calibration.source
    errors = sorted(abs(actual - r.expected_prompt_tokens) / r.expected_prompt_tokens for r, actual in counted)
    assert errors[len(errors) // 2] <= 0.03 and errors[-1] <= 0.05, errors


def test_probes_calibrate_the_same_target_to_the_same_payloads():
    profile = load_profile("quickstart", ["workload.conversations=3", "workload.prefix_tokens=2000"])
    with sim_in_thread(sim_config("healthy")) as sim:
        first = asyncio.run(plan_over_http(sim.url, profile, "probe"))[1]
        second = asyncio.run(plan_over_http(sim.url, profile, "probe"))[1]
    assert [r.payload() for r in first.workload.requests] == [r.payload() for r in second.workload.requests]


def test_a_budget_too_small_for_any_probe_sends_none():
    pool = probe_pool(7)

    class Refuses:
        source, local, probing = "refuses", False, True

        async def count_chat(self, messages):
            raise AssertionError("no probe fits a budget of 5 tokens")

    calibration, requests, tokens = asyncio.run(calibrate_by_probes(Refuses(), pool, True, ProbeBudget(64, 5)))
    assert (requests, tokens) == (0, 0) and calibration.tokens_per_char > 0


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_probes_count_through_the_runs_own_api_as_through_chat(api):
    """A gateway may serve only /v1/messages or /v1/responses: probe requests for chat prompts go through the run's
    API and read its usage, counting what chat counts."""
    messages = [{"role": "system", "content": "You keep accounts."}, {"role": "user", "content": "Sum the ledger."},
                {"role": "assistant", "content": "It sums to 42."}, {"role": "user", "content": "And last month?"}]

    async def count(url: str, via: str) -> int:
        async with Transport(url, "k") as client:
            return await HttpTokenCounter(client, "probe", "loadrepro-sim", via).count_chat(messages)

    with sim_in_thread(sim_config("healthy")) as sim, Gateway(sim.url, "k").running() as gateway:
        through_api = asyncio.run(count(gateway.url, api))
        assert gateway.paths == [PATHS[api]]  # through the run's API, not chat's
        assert asyncio.run(count(gateway.url, "chat")) == through_api > 0
