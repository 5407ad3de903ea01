"""Sizing and behaviour of the simulated engine, with per-scenario defaults.

The defaults are chosen so that each scenario's built-in traffic breaks the stock policy and is handled by the
patched one, while a run still finishes in seconds on a laptop.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from loadrepro.errors import SimConfigError


class Scenario(StrEnum):
    DRAFT_POOL = "draft-pool"
    PAGE_INDEX = "page-index"
    BLOCKS_EXHAUSTED = "blocks-exhausted"
    HEALTHY = "healthy"


class Policy(StrEnum):
    STOCK = "stock"
    PATCHED = "patched"


class DeathMode(StrEnum):
    """How in-flight streams learn that the engine died."""

    ERROR_EVENT = "error-event"  # an SSE error object, then [DONE] (vLLM, SGLang, TensorRT-LLM completions)
    CUT = "cut"  # the connection is closed mid-stream (TensorRT-LLM chat)


@dataclass(frozen=True, slots=True)
class SimConfig:
    scenario: Scenario = Scenario.HEALTHY
    policy: Policy = Policy.STOCK
    model: str = "loadrepro-sim"
    block_size: int = 16
    primary_blocks: int = 16384
    draft_blocks: int = 0  # 0: no draft/indexer mirror pool
    max_model_len: int = 131072
    beam_width: int = 1
    kv_bytes_per_token: int = 2048  # 2 layers x (K, V) x 2 KV heads x 128 dims x 2 bytes
    index_pool_bytes: int = 0  # > 0: the memory estimate the page-index table is sized from
    prefill_tokens_per_s: float = 400_000.0
    step_s: float = 0.004
    natural_output_tokens: int = 48  # mean answer length when the client does not set ignore_eos
    death_status: int = 500  # 400 is how TensorRT-LLM reports engine failures
    death_mode: DeathMode = DeathMode.ERROR_EVENT

    def __post_init__(self) -> None:
        for name, kind in (("scenario", Scenario), ("policy", Policy), ("death_mode", DeathMode)):
            try:
                object.__setattr__(self, name, kind(getattr(self, name)))
            except ValueError as exc:
                raise SimConfigError(str(exc)) from exc
        positive = ("block_size", "primary_blocks", "max_model_len", "beam_width", "kv_bytes_per_token",
                    "natural_output_tokens")
        for name in positive:
            if getattr(self, name) < 1:
                raise SimConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("draft_blocks", "index_pool_bytes"):
            if getattr(self, name) < 0:
                raise SimConfigError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.prefill_tokens_per_s <= 0 or self.step_s <= 0:
            raise SimConfigError("prefill_tokens_per_s and step_s must be positive")
        if self.death_status not in (400, 500, 503):
            raise SimConfigError(f"death_status must be 400, 500 or 503, got {self.death_status}")

    @property
    def prefill_tokens_per_step(self) -> int:
        return max(1, int(self.prefill_tokens_per_s * self.step_s))


_SCENARIO_DEFAULTS: dict[Scenario, dict[str, object]] = {
    # Primary pool is roomy and shares prefixes; the mirror pool holds every token of every request.
    Scenario.DRAFT_POOL: dict(block_size=16, primary_blocks=2048, draft_blocks=512, max_model_len=16384),
    # The index table is sized from a 4 MiB estimate (2048 tokens) while 8192-token requests are accepted.
    Scenario.PAGE_INDEX: dict(block_size=32, primary_blocks=512, max_model_len=8192, index_pool_bytes=4 << 20),
    # Beam search multiplies blocks per request; one pool of 8192 tokens.
    Scenario.BLOCKS_EXHAUSTED: dict(block_size=32, primary_blocks=256, beam_width=4, max_model_len=4096),
    Scenario.HEALTHY: dict(block_size=16, primary_blocks=16384, max_model_len=131072),
}


def sim_config(scenario: Scenario | str, policy: Policy | str = Policy.STOCK, **overrides: object) -> SimConfig:
    """The scenario's defaults with `overrides` (None values are ignored) applied on top."""
    known = {f.name for f in dataclasses.fields(SimConfig)}
    unknown = set(overrides) - known
    if unknown:
        raise SimConfigError(f"unknown sim setting(s): {', '.join(sorted(unknown))}")
    if scenario not in set(Scenario):
        raise SimConfigError(f"unknown scenario {scenario!r}; one of: {', '.join(Scenario)}")
    values = {**_SCENARIO_DEFAULTS[Scenario(scenario)], **{k: v for k, v in overrides.items() if v is not None}}
    return SimConfig(scenario=scenario, policy=policy, **values)  # type: ignore[arg-type]
