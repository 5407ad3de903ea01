"""Sizing and behaviour of the simulated engine, with per-scenario defaults.

The defaults are chosen so that each scenario's built-in traffic breaks the stock policy and is handled by the
patched one, while a run still finishes in seconds on a laptop.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import ValidationError

from loadrepro.config.profile import SimSpec
from loadrepro.errors import SimConfigError


class Scenario(StrEnum):
    DRAFT_POOL = "draft-pool"
    PAGE_INDEX = "page-index"
    BLOCKS_EXHAUSTED = "blocks-exhausted"
    HEALTHY = "healthy"
    PREFIX_CORRUPTION = "prefix-corruption"


class Policy(StrEnum):
    STOCK = "stock"
    PATCHED = "patched"


class DeathMode(StrEnum):
    """How in-flight streams learn that the engine died."""

    ERROR_EVENT = "error-event"  # an SSE error object, then [DONE] (vLLM, SGLang, TensorRT-LLM completions)
    CUT = "cut"  # the connection is closed mid-stream (TensorRT-LLM chat)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The settings a running engine uses: a profile's [sim] section (SimSpec, which validates them) resolved
    against its scenario's defaults. Its fields are SimSpec's, all filled in (a test holds the two together)."""

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
    natural_output_tokens: int = 48
    death_status: int = 500  # 400 is how TensorRT-LLM reports engine failures
    death_mode: DeathMode = DeathMode.ERROR_EVENT
    reasoning_tokens: int = 0  # the first N output tokens of each answer are reasoning
    leak_on_abort: bool = False  # stock: an aborted request is never freed (a zombie)
    race_probability: float = 0.0  # stock: the share of starts on which the scheduler race kills the engine
    race_seed: int | None = None  # the race's draw (None: the runtime draws one from the time it starts)

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
    # A small pool that prefix-shared turns keep full, so cached blocks are taken for new work all the time.
    Scenario.PREFIX_CORRUPTION: dict(block_size=16, primary_blocks=640, max_model_len=8192),
}


def resolve(spec: SimSpec) -> SimConfig:
    """The scenario's defaults with the settings `spec` gives applied on top."""
    values = {**_SCENARIO_DEFAULTS[Scenario(spec.scenario)], **spec.model_dump(exclude_none=True)}
    values.update(scenario=Scenario(spec.scenario), policy=Policy(spec.policy))
    if "death_mode" in values:
        values["death_mode"] = DeathMode(values["death_mode"])
    return SimConfig(**values)


def sim_config(scenario: Scenario | str, policy: Policy | str = Policy.STOCK, **overrides: object) -> SimConfig:
    """Validate settings as a [sim] section would be (None values are ignored) and resolve them."""
    settings = {k: v for k, v in overrides.items() if v is not None}
    try:
        spec = SimSpec(scenario=str(scenario), policy=str(policy), **settings)
    except ValidationError as exc:
        raise SimConfigError(describe_errors(exc)) from exc
    return resolve(spec)


def describe_errors(exc: ValidationError) -> str:
    """One line per bad setting, named as its key: `primary_blocks: Input should be greater than or equal to 1`."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'sim'}: "
                     f"{'unknown setting' if e['type'] == 'extra_forbidden' else e['msg']}" for e in exc.errors())
