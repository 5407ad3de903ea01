import pytest

from loadrepro.sim.config import sim_config
from loadrepro.sim.serve import sim_in_thread


@pytest.fixture
def serve(tmp_path):
    """Start a simulated engine on an ephemeral loopback port; stopped when the test ends."""
    with_stack = []

    def start(scenario: str = "healthy", policy: str = "stock", **overrides):
        context = sim_in_thread(sim_config(scenario, policy, **overrides), tmp_path / f"engine-{len(with_stack)}.log")
        running = context.__enter__()
        with_stack.append(context)
        return running

    yield start
    for context in reversed(with_stack):
        context.__exit__(None, None, None)
