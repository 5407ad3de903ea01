"""Length targets in the target's own tokens, calibrated over real HTTP against the simulated engine."""

import asyncio

import httpx
import pytest

from loadrepro.profile import load_profile
from loadrepro.sim.config import sim_config
from loadrepro.sim.serve import sim_in_thread
from loadrepro.workload.plan import plan_workload
from loadrepro.workload.tokens import HttpTokenCounter, detect_counter


async def plan_over_http(url: str, profile, flavour: str | None = None):
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        counter = await detect_counter(client, "loadrepro-sim") if flavour is None else \
            HttpTokenCounter(client, flavour, "loadrepro-sim")
        plan = await plan_workload(profile, counter)
        counted = []
        for request in plan.workload.requests:
            counted.append((request, await counter.count_chat(request.body["messages"])))
        return counter, plan, counted


@pytest.mark.parametrize("flavour", [None, "probe"])
def test_lengths_hit_targets_within_two_percent_on_the_targets_tokenizer(flavour):
    profile = load_profile("quickstart", ["workload.conversations=4", "workload.turns=3",
                                          "workload.prefix_tokens=6000"])
    with sim_in_thread(sim_config("healthy")) as sim:
        counter, plan, counted = asyncio.run(plan_over_http(sim.url, profile, flavour))
    assert counter.source == ("POST /tokenize (vLLM)" if flavour is None else "usage.prompt_tokens of probes")
    assert not counter.local and plan.calibration.counted_records < 100  # a sample, not the whole pool
    assert plan.within_tolerance and plan.checks
    for request, actual in counted:
        assert abs(actual - request.expected_prompt_tokens) <= 0.02 * request.expected_prompt_tokens
    turn_one = [actual for request, actual in counted if request.turn == 1]
    assert all(abs(a - 6000) <= 120 for a in turn_one)
