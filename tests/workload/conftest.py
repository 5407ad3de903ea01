import asyncio

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.workload.plan import plan_workload
from loadrepro.workload.tokens import SimTokenCounter


@pytest.fixture
def plan_local():
    """Plan a profile (name or path, with --set overrides) against the simulated engine's local tokenizer."""

    def plan(profile: str = "quickstart", *overrides: str):
        return asyncio.run(plan_workload(load_profile(profile, list(overrides)), SimTokenCounter()))

    return plan
