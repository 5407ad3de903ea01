"""The embedded default target: the command line that runs the simulated engine as a managed engine."""

from __future__ import annotations

import shlex
import sys

from loadrepro.profile import SimSpec

_FLAGS = {"block_size": "--block-size", "primary_blocks": "--primary-blocks", "draft_blocks": "--draft-blocks",
          "max_model_len": "--max-model-len", "beam_width": "--beam-width", "index_pool_bytes": "--index-pool-bytes",
          "prefill_tokens_per_s": "--prefill-tokens-per-s", "death_status": "--death-status",
          "death_mode": "--death-mode"}


def sim_engine_command(spec: SimSpec) -> str:
    """A `{host}`/`{port}` command template for ManagedEngine, with the profile's [sim] settings as flags."""
    words = [sys.executable, "-m", "loadrepro", "sim", "--scenario", spec.scenario, "--policy", spec.policy]
    for key, flag in _FLAGS.items():
        value = getattr(spec, key)
        if value is not None:
            words += [flag, str(value)]
    if spec.step_s is not None:
        words += ["--step-ms", str(spec.step_s * 1000)]
    return shlex.join(words) + " --host {host} --port {port}"
