"""`loadrepro init llamacpp|vllm`: a starter profile written from a probe of the target, sized to what it publishes
(a request's context, llama.cpp's slots, vLLM's KV pool) with --fit's arithmetic, each number with a comment saying
why it is what it is."""

from __future__ import annotations

from dataclasses import dataclass

from loadrepro.config.capacity import smallest_pool_tokens
from loadrepro.config.profile import Profile
from loadrepro.config.workload_spec import WorkloadSpec
from loadrepro.errors import UsageError
from loadrepro.load.limits import discover
from loadrepro.load.probe import Probe, probe
from loadrepro.load.transport import Transport, get_json
from loadrepro.runs.sizing import FIT_SHARE, fitted, longest_request

FLAVOURS: dict[str, str] = {  # `init`'s engine names and the probe's
    "llamacpp": "llama.cpp", "vllm": "vLLM"}
DEFAULT_CONCURRENCY = 8  # a target that publishes no slots and no pool: a few requests at once
MAX_CONVERSATIONS = 64  # a starter run stays short, whatever the pool holds
PRESSURE = 1.5  # a vLLM starter's conversations need this many times what its KV pool holds at once


@dataclass(frozen=True, slots=True)
class Target:
    """What a starter profile is sized from: the probe, and the slots or the KV pool the target publishes."""

    probe: Probe
    context: int
    context_source: str
    slots: int | None  # llama.cpp's total_slots in /props
    pool_tokens: int | None  # the KV pool of vLLM's cache_config_info
    pool_source: str


async def probed(engine: str, base_url: str, api_key: str | None) -> Target:
    """The target probed, with what sizes a profile for it; UsageError when it is another engine or publishes no
    context a request may have."""
    found = await probe(base_url, api_key=api_key)
    wanted = FLAVOURS[engine]
    if found.flavour not in (wanted, "unknown"):
        other = next((k for k, v in FLAVOURS.items() if v == found.flavour), None)
        raise UsageError(f"the target at {base_url} is {found.flavour} ({'; '.join(found.evidence)}), not {wanted}"
                         + (f": loadrepro init {other}" if other else ""))
    if not found.max_model_len:
        raise UsageError(f"the target at {base_url} publishes no context a request may have (no max_model_len in "
                         "/v1/models, no n_ctx in /props): a starter profile cannot be sized to it")
    async with Transport(base_url, api_key, timeout_s=10.0) as http:
        props = await get_json(http, "/props") if engine == "llamacpp" else None
        limits = await discover(http) if engine == "vllm" else None
    slots = props.get("total_slots") if isinstance(props, dict) else None
    return Target(found, found.max_model_len,
                  "n_ctx per slot in /props" if engine == "llamacpp" else "max_model_len in /v1/models",
                  slots if isinstance(slots, int) and slots > 0 else None,
                  smallest_pool_tokens(limits) if limits is not None else None,
                  limits.source if limits is not None else "")


def starter_profile(engine: str, target: Target) -> str:
    """The profile's TOML, commented: conversations of a shared prefix, a warm-up and two follow-ups, the longest
    request at most FIT_SHARE of the context, and more of them than the target serves at once."""
    c, source = target.context, f"the {target.context:,} tokens a request may have ({target.context_source})"
    if target.pool_tokens is not None and target.pool_tokens < c:  # a pool smaller than one longest sequence binds
        c, source = target.pool_tokens, f"its whole KV pool of {target.pool_tokens:,} tokens ({target.pool_source})"
    if target.slots is not None and target.slots > 1:
        # llama.cpp does not publish whether its slots share one KV pool of a slot's n_ctx (what it runs without
        # -np: kv_unified in its log); when they do, requests that fit a slot each overflow it together
        c, source = target.context // target.slots, (
            f"1/{target.slots} of the {target.context:,} tokens a slot may have ({target.context_source}): "
            f"llama.cpp does not publish whether its {target.slots} slots share one pool of that size, as they do "
            "without -np, so their requests are sized to fit it together")
    try:
        spec, w = _sized(c, source)
    except UsageError:
        if target.slots is None or target.slots < 2:
            raise
        # 1/N of a small slot holds no conversation: slots of their own pools (-np N) are what llama.cpp runs then
        c, source = target.context, (
            f"the {target.context:,} tokens a slot may have ({target.context_source}); 1/{target.slots} of it, "
            f"for {target.slots} slots sharing one pool as they do without -np, holds no conversation: if they do "
            "share it, requests at once overflow it")
        spec, w = _sized(c, source)
    if target.slots is None and target.pool_tokens is not None:
        w = _grown(w, target.pool_tokens, int(c * FIT_SHARE))
    longest = longest_request(w)
    conversations, why = _conversations(target, longest)
    model = target.probe.models[0] if target.probe.models else ""
    half = ("about half of" if w.prefix_tokens == spec.prefix_tokens else "as much as fits in"
            if w.prefix_tokens < spec.prefix_tokens else "grown toward conversations that overfill the KV pool, within")
    flavour = FLAVOURS[engine]
    return "\n".join([
        f"# A starter profile for the {flavour} server probed at {target.probe.base_url}, written by loadrepro init.",
        "# Run it: loadrepro run --profile THIS_FILE --base-url URL. Every number says why it is what it is; change",
        "# them to your own traffic (docs/workloads.md, docs/reference/profile.md).",
        f'description = "Prefix-shared conversations on {flavour} ({model or "its first model"}), sized to its '
        f'{target.context:,}-token context"',
        'api = "chat"',
        f'model = "{model}"  # the first model /v1/models lists',
        "",
        "[workload]",
        'kind = "conversations"',
        "seed = 7  # the same seed, the same workload: a rerun sends the same requests",
        f"conversations = {conversations}  # {why}",
        f"turns = {w.turns}  # a warm-up, then follow-ups that reuse its prefix (prefix caching is seen on them)",
        f"prefix_tokens = {w.prefix_tokens}  # {half} {c:,} tokens: {source}",
        f"turn_tokens = {w.turn_tokens}  # what each later turn adds: the follow-ups grow, as agents' do",
        f"max_tokens = {w.max_tokens}  # each follow-up's answer; the longest request is {longest:,} tokens, at most "
        f"{FIT_SHARE:.0%} of {c:,} (room for the chat template and a count's error)",
        "warm_max_tokens = 1  # the warm-up only fills the prefix",
        "ignore_eos = true  # every answer is max_tokens long, so every request is as long as planned",
        "",
        "[load]",
        f"concurrency = {conversations}  # every conversation at once: the engine queues what it cannot serve",
        "request_timeout_s = 300  # a small CPU engine answers slowly: a timeout is the engine's, not a guess",
        "stall_timeout_s = 60  # no byte for this long on an open stream: stalled",
        "",
        "[verdict]",
        "allow_rejected = false  # every request is sized to fit: a refusal is a finding, not the workload's",
        "",
    ])


def _sized(c: int, source: str) -> tuple[WorkloadSpec, WorkloadSpec]:
    """A starter's workload as first drawn for a request of `c` tokens, and as --fit sizes it; UsageError when `c`
    is too small for a conversation."""
    spec = WorkloadSpec(conversations=1, turns=3, prefix_tokens=max(128, c // 2), turn_tokens=max(16, c // 20),
                        max_tokens=max(16, c // 10), ignore_eos=True)
    sized, _ = fitted(Profile(name="starter", workload=spec), None, (c, source))
    return spec, sized.workload


def _conversations(target: Target, longest: int) -> tuple[int, str]:
    """How many conversations a starter sends at once, and why: more than the target serves at once."""
    if target.slots is not None:
        return 2 * target.slots, f"twice its {target.slots} slots (total_slots in /props): half of them wait for one"
    if target.pool_tokens is not None:
        pool = target.pool_tokens
        fit = max(1, pool // longest)
        n = min(MAX_CONVERSATIONS, max(fit + 2, -(-int(PRESSURE * pool) // longest)))
        held = f"its KV pool of {pool:,} tokens ({target.pool_source}) holds {fit} of the longest requests at once"
        if n * longest > pool:
            return n, (f"{held}; these {n} need up to {n * longest:,} tokens ({n * longest / pool:.1f}x the pool): "
                       "the others wait (or are preempted)")
        return n, (f"{held}; these {n} need up to {n * longest:,} tokens ({n * longest / pool:.0%} of the pool), so "
                   f"nothing waits: a starter stays at {MAX_CONVERSATIONS} conversations to keep a run short; for KV "
                   f"pressure start vLLM with a pool under {MAX_CONVERSATIONS * longest * 2 // 3:,} tokens "
                   "(--kv-cache-memory-bytes) and init again")
    return DEFAULT_CONCURRENCY, "it publishes no slots and no KV pool: a few at once"


def _grown(w: WorkloadSpec, pool: int, room: int) -> WorkloadSpec:
    """`w` with its prefix grown, no further than `room` for its longest request, toward conversations that need
    PRESSURE x the KV pool when no more than MAX_CONVERSATIONS of them are sent: a pool that holds many of its
    longest requests is pressed by longer ones, not by a longer run."""
    wanted = -(-int(PRESSURE * pool) // MAX_CONVERSATIONS)  # the longest request MAX_CONVERSATIONS of need
    grow = min(wanted, room) - longest_request(w)
    return w.model_copy(update={"prefix_tokens": w.prefix_tokens + grow}) if grow > 0 else w
