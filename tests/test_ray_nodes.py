"""A Ray cluster of two nodes on this one machine (Ray's own cluster test utility: a head and a second raylet): the
load's actors are placed on both, and an offset injected into the clock of the actor on the second node is
measured and taken out of its records to within the residual error the run states."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.load.backend.base import LoadSetup, WorkerCrashed
from loadrepro.load.backend.ray_actors import START_LEAD_S, RayArrivals, RayWorker
from loadrepro.load.client import Client, ClientConfig
from loadrepro.load.live import LiveState
from loadrepro.records import Outcome, RequestRecord
from loadrepro.workload.plan import plan_workload
from loadrepro.workload.tokens import SimTokenCounter
from tests.stub_server import StubServer

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402 - only once Ray is known to be there

SKEW_NS = 7_000_000_000  # the second node's actor runs 7 s ahead of the driver


@pytest.fixture(scope="module")
def two_nodes():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().get_node_id()
    finally:
        ray.shutdown()
        cluster.shutdown()


def skewed_on_other_nodes(head: str) -> type[RayWorker]:
    """RayWorker whose clock runs SKEW_NS ahead on any node but the head (defined here, so Ray ships it by value)."""

    class Skewed(RayWorker):
        def clock(self) -> int:
            ahead = ray.get_runtime_context().get_node_id() != head
            return time.perf_counter_ns() + (SKEW_NS if ahead else 0)

    return Skewed


@pytest.mark.timeout(300)
async def test_actors_on_two_nodes_and_a_skewed_clock_corrected_within_the_stated_residual(two_nodes):
    profile = load_profile("healthy", ["workload.conversations=4", "workload.turns=2", "load.concurrency=4",
                                       "workload.prefix_tokens=200", "workload.max_tokens=4", "model='stub'"])
    workload = (await plan_workload(profile, SimTokenCounter())).workload
    records: list[RequestRecord] = []
    with StubServer("ok", tokens=4).running() as stub:
        config = ClientConfig(base_url=stub.url, api="chat", model="stub", concurrency=4, request_timeout_s=60.0,
                              stall_timeout_s=30.0)
        async with Client(config) as client:
            live = LiveState(time.perf_counter_ns(), None, None)
            setup = LoadSetup(profile.load, workload, 7, client, live, asyncio.Event(), records.append)
            arrivals = RayArrivals(setup, 2, None, worker=skewed_on_other_nodes(two_nodes))
            await arrivals.prepare()
            live.started_ns = before = time.perf_counter_ns()
            await asyncio.wait_for(arrivals.run(), 120)
            after = time.perf_counter_ns()
    assert len(arrivals.nodes) == 2  # one actor on each node
    skewed = [offset for offset in arrivals.offsets if offset]
    assert len(skewed) == 1 and abs(skewed[0] - SKEW_NS) <= arrivals.residual_ns  # measured within its residual
    assert 0 < arrivals.residual_ns < 50_000_000
    assert [r.outcome for r in records] == [Outcome.OK] * 8
    for r in records:  # every time back on the driver's clock, inside the run (within the residual)
        assert before - arrivals.residual_ns <= r.sent_ns <= r.end_ns <= after + arrivals.residual_ns
    # both actors began at one instant, told to them together: none sent a request before it
    assert min(r.sent_ns for r in records) >= before + START_LEAD_S * 1e9 - arrivals.residual_ns
    assert "2 Ray actors on 2 node(s); clock offsets measured, residual error at most" in arrivals.notes()[0]


def failing_on_second_share() -> type[RayWorker]:
    """RayWorker whose second share raises at once (defined here, so Ray ships it by value)."""

    class Failing(RayWorker):
        async def _run(self, opened: asyncio.Event) -> None:
            if self._share.index == 1:
                raise RuntimeError("the share broke")
            await super()._run(opened)

    return Failing


@pytest.mark.timeout(300)
async def test_an_actor_whose_share_raises_ends_the_load_with_the_crash_named_and_keeps_what_arrived(two_nodes):
    profile = load_profile("healthy", ["workload.conversations=4", "workload.turns=1", "load.concurrency=2",
                                       "load.duration_s=30", "workload.prefix_tokens=200", "workload.max_tokens=4",
                                       "model='stub'"])
    workload = (await plan_workload(profile, SimTokenCounter())).workload
    records: list[RequestRecord] = []
    with StubServer("ok", tokens=4, token_delay_s=0.05).running() as stub:
        config = ClientConfig(base_url=stub.url, api="chat", model="stub", concurrency=2, request_timeout_s=60.0,
                              stall_timeout_s=30.0)
        async with Client(config) as client:
            live = LiveState(time.perf_counter_ns(), None, None)
            setup = LoadSetup(profile.load, workload, 7, client, live, asyncio.Event(), records.append)
            arrivals = RayArrivals(setup, 2, None, worker=failing_on_second_share())
            await arrivals.prepare()
            live.started_ns = time.perf_counter_ns()
            with pytest.raises(WorkerCrashed, match="Ray actor 1 raised RuntimeError: the share broke"):
                await asyncio.wait_for(arrivals.run(), 60)  # a 30 s soak: cancelled long before, not waited out
    assert all(r.id % 2 == 1 for r in records)  # the first actor's ids: what it sent before it was cancelled
