"""Profiles: the TOML description of one reproduction (traffic, load, watching, verdict), validated strictly.

A profile is named (a file in the package's `profiles/` folder, linked from the project's top level) or a path.
Every key is checked: a typo is an error that names the key. `--set a.b=VALUE` overrides any key; VALUE is read as
TOML, or as a plain string when it is not valid TOML.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loadrepro.errors import ProfileError

# Shipped inside the package, so that an installed wheel has them; the project's top-level profiles/ links here.
PROFILES_DIR = Path(str(resources.files("loadrepro") / "profiles"))


HEALTH_GIVE_UP = 4  # a /health poll with no answer after this many health_timeout_s is unreachable

# The generation APIs a target may serve (workload/apis.py writes a request for each).
Api = Literal["chat", "completions", "responses", "messages"]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WorkloadSpec(_Section):
    kind: Literal["conversations", "trace"] = "conversations"
    trace: str = ""
    trace_block_tokens: int = Field(512, ge=1)
    seed: int = 7
    conversations: int = Field(12, ge=1)
    groups: int = Field(0, ge=0)
    group_prefix_tokens: int = Field(0, ge=0)  # groups > 0: tokens of the shared group document (0: half the prefix)
    turns: int = Field(2, ge=1)
    prefix_tokens: int = Field(81000, ge=64)
    prefix_tokens_p95: int = Field(0, ge=0)
    turn_tokens: int = Field(600, ge=1)
    max_tokens: int = Field(32768, ge=1)
    warm_max_tokens: int = Field(1, ge=1)
    ignore_eos: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        if self.kind == "trace" and not self.trace:
            raise ValueError("kind = 'trace' needs workload.trace, the path of a Mooncake-format JSONL file")
        if self.prefix_tokens_p95 and self.prefix_tokens_p95 <= self.prefix_tokens:
            raise ValueError("prefix_tokens_p95 must be greater than prefix_tokens (the p50), or 0")
        if self.groups > self.conversations:
            raise ValueError("groups cannot exceed conversations")
        if self.group_prefix_tokens >= self.prefix_tokens:
            raise ValueError("group_prefix_tokens must be smaller than prefix_tokens")
        return self


class LoadSpec(_Section):
    concurrency: int = Field(12, ge=1)
    arrival: Literal["closed", "poisson"] = "closed"
    rate: float = Field(0.0, ge=0)
    duration_s: float = Field(0, ge=0)
    cancel_fraction: float = Field(0.0, ge=0, le=1)
    request_timeout_s: float = Field(900, gt=0)
    stall_timeout_s: float = Field(60, gt=0)  # silence after the first token, or of the whole engine, that is a stall
    ttft_timeout_s: float = Field(0, ge=0)  # > 0: the longest wait for a first token (else request_timeout_s)
    stop_on_death: bool = True
    max_retries: int = Field(3, ge=0)  # 429 / 503-with-Retry-After / 503 in a stream: retries before "throttled"
    checkpoint_s: float | None = Field(None, ge=0)  # reports rewritten this often (unset: 60 s in soaks; 0: never)
    max_rps: float = Field(0.0, ge=0)  # > 0: at most this many request starts in any one second
    keep_records: int = Field(20_000, ge=1)  # completed records kept in memory (and as many others); beyond, counted

    @model_validator(mode="after")
    def _rate_for_poisson(self) -> LoadSpec:
        if self.arrival == "poisson" and self.rate <= 0:
            raise ValueError("arrival = 'poisson' needs rate > 0 (requests per second)")
        return self


class WatchSpec(_Section):
    health_path: str = Field("/health", description="Where the target answers health checks; empty: not polled.")
    health_interval_s: float = Field(1.0, gt=0, description="Seconds between /health polls.")
    metrics_path: str = Field("/metrics", description="Prometheus metrics to scrape; empty: not scraped.")
    metrics_interval_s: float = Field(0.5, gt=0, description="Seconds between scrapes of the metrics.")
    engine_log: str = Field("", description="A log file of the engine's to scan for error signatures.")
    health_timeout_s: float = Field(
        5.0, gt=0, description="A /health answer slower than this is slow (rule health_latency); a poll is given "
        f"up as unreachable only after {HEALTH_GIVE_UP}x this with no answer at all.")
    liveness_timeout_s: float = Field(
        1.0, gt=0, description="The timeout of the liveness probe an orchestrator would run against the health "
        "path (Kubernetes' timeoutSeconds, 1 by default).")
    liveness_failures: int = Field(
        3, ge=1, description="Probes in a row that fail or answer slower than liveness_timeout_s before the "
        "orchestrator restarts the engine (Kubernetes' failureThreshold, 3 by default).")
    liveness_period_s: float = Field(
        10.0, gt=0, description="How often the orchestrator probes (Kubernetes' periodSeconds, 10 by default).")
    canary_interval_s: float = Field(
        0.0, ge=0, description="> 0: a salted one-token request this often, on its own connection and outside the "
        "workload's concurrency; its time to first token is kept as a series, and canaries that get nothing while "
        "/health answers 200 show an engine wedged while healthy.")


class SimSpec(_Section):
    """The embedded simulated engine: the one definition of its settings.

    The same fields are the profile's [sim] keys, the `sim` command's flags and the arguments loadrepro starts the
    engine with. None means the scenario's default (sim/config.py); descriptions are the flags' help.
    """

    scenario: Literal["draft-pool", "page-index", "blocks-exhausted", "healthy"] = Field(
        "draft-pool", description="Which seed failure the engine models.")
    policy: Literal["stock", "patched"] = Field("stock", description="stock: the defect; patched: the admission fix.")
    model: str | None = Field(None, min_length=1, description="Model id served at /v1/models.")
    block_size: int | None = Field(None, ge=1, description="Tokens per KV block.")
    primary_blocks: int | None = Field(None, ge=1, description="Blocks in the primary (prefix-reusing) pool.")
    draft_blocks: int | None = Field(None, ge=0, description="Blocks in the draft/indexer mirror pool (0: none).")
    max_model_len: int | None = Field(None, ge=1, description="Longest context accepted, in tokens.")
    beam_width: int | None = Field(None, ge=1, description="Beams per request (multiplies blocks).")
    kv_bytes_per_token: int | None = Field(None, ge=1, description="KV-cache bytes one token takes.")
    index_pool_bytes: int | None = Field(
        None, ge=0, description="Memory estimate the page-index table is sized from (0: no table).")
    prefill_tokens_per_s: float | None = Field(None, gt=0, description="Prefill speed, tokens per second.")
    step_s: float | None = Field(None, gt=0, description="Duration of one engine step (one decode token), seconds.")
    natural_output_tokens: int | None = Field(
        None, ge=1, description="Mean answer length when a request does not set ignore_eos.")
    death_status: Literal[400, 500, 503] | None = Field(
        None, description="HTTP status of requests after the engine died: 500, or 400 as TensorRT-LLM reports it.")
    death_mode: Literal["error-event", "cut"] | None = Field(
        None, description="How in-flight streams end when the engine dies.")
    reasoning_tokens: int | None = Field(
        None, ge=0, description="The first N tokens of every answer are reasoning, streamed before its content "
        "(chat: delta.reasoning; responses: reasoning_text deltas; messages: a thinking block).")


class EngineSpec(_Section):
    """The target's KV-cache numbers, for predictions; what is left out is discovered from the target."""

    layers: int | None = Field(None, ge=1)
    kv_heads: int | None = Field(None, ge=1)
    head_dim: int | None = Field(None, ge=1)
    kv_dtype: Literal["fp32", "fp16", "bf16", "fp8", "int8"] = "fp16"
    bytes_per_token: int | None = Field(None, ge=1)  # instead of layers x heads x dims x dtype
    tokens_per_block: int | None = Field(None, ge=1)
    pool_bytes: int | str | None = None  # a size: 4194304, "4MiB", "60.51GiB"
    pool_blocks: int | None = Field(None, ge=1)
    gpu_memory_bytes: int | str | None = None  # with free_fraction and weights_bytes, instead of pool_bytes
    free_fraction: float = Field(0.9, gt=0, le=1)
    weights_bytes: int | str = 0
    max_seq_len: int | None = Field(None, ge=1)
    max_batch: int = Field(1, ge=1)
    beam_width: int = Field(1, ge=1)
    draft_bytes_per_token: int = Field(0, ge=0)
    draft_pool_bytes: int | str | None = None  # None with draft bytes/token: the draft shares the pool
    index_pool_bytes: int | str | None = None  # the memory estimate a page-index table is sized from


class VerdictSpec(_Section):
    allow_rejected: bool = True
    min_completed: float = Field(1.0, ge=0, le=1)
    require_post_health: bool = True
    min_cache_hit: float = Field(0.0, ge=0, le=1)
    max_prompt_error: float = Field(0.05, gt=0)  # planned vs usage.prompt_tokens beyond this share: a warning
    max_ttft_regression: float = Field(0.5, ge=0)  # compare/ab: patched TTFT p50 may grow by this share at most
    max_throughput_regression: float = Field(0.2, ge=0, le=1)  # and its decode tokens/s may drop by this share
    window_s: float = Field(60.0, gt=0)  # long runs are summarised, and judged, window by window
    max_ttft_growth: float = Field(1.0, ge=0)  # degradation: last window's TTFT p95 over the first steady one's
    max_error_growth: float = Field(0.05, ge=0, le=1)  # degradation: and its error rate, in points
    max_kv_leak: float = Field(0.05, gt=0, le=1)  # KV usage at quiet moments may creep up this much in all
    max_health_latency_s: float = Field(
        0.0, ge=0, description="> 0: a /health slower than this fails the run (else slowness is a warning).")


class SignatureSpec(_Section):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    name: str
    pattern: str
    class_: Literal["F", "P", "T", "R"] = Field(alias="class")
    throttling: bool = False  # the text means "busy, retry later": such a request is retried, then `throttled`


class Profile(_Section):
    name: str
    description: str = ""
    api: Api = "chat"
    model: str = ""
    workload: WorkloadSpec = WorkloadSpec()
    load: LoadSpec = LoadSpec()
    watch: WatchSpec = WatchSpec()
    sim: SimSpec = SimSpec()
    engine: EngineSpec = EngineSpec()
    verdict: VerdictSpec = VerdictSpec()
    signatures: tuple[SignatureSpec, ...] = ()


def builtin_profiles() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PROFILES_DIR.glob("*.toml"))}


def _resolve(path_or_name: str) -> Path:
    """A name with a path separator or ending in .toml is a file; any other is a built-in profile, whatever the
    current folder holds (run folders are often named after their profile)."""
    path = Path(path_or_name)
    if path.suffix == ".toml" or "/" in path_or_name or (os.sep != "/" and os.sep in path_or_name):
        if not path.is_file():
            raise ProfileError(f"profile file not found: {path}")
        return path
    known = builtin_profiles()
    if path_or_name not in known:
        here = f" (a file of that name is here: give ./{path_or_name})" if path.is_file() else ""
        raise ProfileError(f"no built-in profile named {path_or_name!r}{here}; known: {', '.join(known) or 'none'}")
    return known[path_or_name]


def parse_override(assignment: str) -> tuple[list[str], Any]:
    """`a.b=VALUE` -> (["a", "b"], value); VALUE is TOML (4, 0.5, true, "x", [1, 2]) or else a plain string."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise ProfileError(f"--set wants KEY=VALUE, got {assignment!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def _apply(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ProfileError(f"--set {'.'.join(path)}: {part} is not a section")
        node = child
    node[path[-1]] = value


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "profile"
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


def load_profile(path_or_name: str, overrides: list[str] | tuple[str, ...] = ()) -> Profile:
    """Read, override and validate a profile; ProfileError names every bad key."""
    path = _resolve(path_or_name)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"cannot read profile {path}: {exc}") from exc
    data.setdefault("name", path.stem)
    workload = data.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("trace"), str) and workload["trace"]:
        # A trace path written in a profile is relative to the profile's own folder; one given with --set is
        # relative to where the command runs.
        workload["trace"] = str((path.parent / workload["trace"]).resolve())
    return _overridden(data, overrides, str(path))


def with_overrides(profile: Profile, overrides: list[str] | tuple[str, ...]) -> Profile:
    """A loaded profile with `KEY=VALUE` overrides applied and checked as load_profile checks them."""
    return _overridden(profile.model_dump(mode="json", by_alias=True), overrides, profile.name)


def _overridden(data: dict[str, Any], overrides: Sequence[str], name: str) -> Profile:
    """`data` with `KEY=VALUE` overrides applied, as a checked Profile."""
    for assignment in overrides:
        _apply(data, *parse_override(assignment))
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"profile {name} is not valid:\n{_describe(exc)}") from exc


def write_profile(profile: Profile, path: Path) -> Path:
    """The resolved profile as TOML, loadable with load_profile (unset keys, which TOML cannot hold, left out)."""
    data = profile.model_dump(mode="json", by_alias=True)
    for section, values in data.items():
        if isinstance(values, dict):
            data[section] = {k: v for k, v in values.items() if v is not None}
    if not data["signatures"]:
        del data["signatures"]
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path
