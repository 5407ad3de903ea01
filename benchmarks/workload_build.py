"""Benchmark: building workloads, corpus included. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/workload_build.py

For each workload: faker record pool, calibration (the simulated engine's tokenizer, in process), assembly of
every request's prompt, JSON encoding of every payload, and the whole plan (pool + calibration + build + the
verification count), with prompt tokens per second and the process's peak resident memory.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time

from loadrepro.config.profile_files import load_profile
from loadrepro.workload.corpus import FAKER_VERSION, record_pool
from loadrepro.workload.plan import build_workload, plan_workload
from loadrepro.workload.tokens import SimTokenCounter, calibrate

CASES = {
    "dsa-prefix-shared (12 x 81k, 2 turns)": [],
    "32 conversations x 150k, 2 turns": ["workload.conversations=32", "workload.prefix_tokens=150000"],
}


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def main() -> None:
    print(f"faker {FAKER_VERSION}")
    for name, overrides in CASES.items():
        profile = load_profile("dsa-prefix-shared", overrides)
        pool, pool_s = timed(lambda: record_pool(profile.workload.seed))
        calibration, calibrate_s = timed(lambda: asyncio.run(calibrate(SimTokenCounter(), pool)))
        workload, build_s = timed(lambda: build_workload(profile, pool, calibration))
        tokens = sum(r.expected_prompt_tokens for r in workload.requests)
        encoded, encode_s = timed(lambda: sum(len(json.dumps(r.body)) for r in workload.requests))
        plan, plan_s = timed(lambda: asyncio.run(plan_workload(profile, SimTokenCounter())))
        print(f"\n{name}: {len(workload.requests)} requests, {tokens / 1e6:.2f} M prompt tokens, "
              f"{encoded / 1e6:.1f} MB of JSON")
        print(f"  record pool (faker)      {pool_s * 1000:8.0f} ms")
        print(f"  calibration              {calibrate_s * 1000:8.0f} ms")
        print(f"  assembly                 {build_s * 1000:8.1f} ms  {tokens / build_s / 1e6:8.0f} M prompt tokens/s")
        print(f"  JSON encoding            {encode_s * 1000:8.0f} ms  {tokens / encode_s / 1e6:8.1f} M prompt tokens/s")
        print(f"  whole plan (verified)    {plan_s * 1000:8.0f} ms")
        print(f"  peak RSS so far          {peak_mib():8.0f} MiB")


if __name__ == "__main__":
    main()
