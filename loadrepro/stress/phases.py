"""The battery's phases, gentle first: each the traffic that breaks engines of one kind, written as a profile made
from the battery's base profile (its target, watch, verdict and [sim] settings kept; its workload and load the
phase's own) and sized to what the target publishes: --fit scales each phase's requests to the target's context
or KV pool, and the phases of a varying rate send multiples of the rate the `steady` phase measured. A phase
whose traffic the target cannot take, or loadrepro does not send yet, is skipped with its reason (a string)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from loadrepro.config.profile import Profile
from loadrepro.errors import ProfileError
from loadrepro.runs.sizing import OVERRUN_TURN_OVERHEAD
from loadrepro.schema.stress_report import Capabilities

ORDINARY_SHARE = 0.4  # of what one request may hold, for the phases not about the limit
TURN_TOKENS = 64  # what each follow-up adds
# The least prefix an ordinary phase holds, whatever the share: a system prompt and a template (about 120 tokens in
# a Llama chat template) and room for the conversation's own records; a KV pool of 512 tokens takes it whole.
LEAST_PREFIX = 256
DEFAULT_RATE = 2.0  # requests/s the rate phases start from when no steady phase measured the target's
MIN_WINDOW_REQUESTS = 8  # ramp-recovery's windows hold at least this many requests at its low rate
RAMP_TURNS = 2  # ramp-recovery's requests a conversation, as steady's: its rates are of conversations
PRESSURE = 1.5  # long-context's requests at once need this many times the KV pool
LONG_AT_ONCE, MAX_LONG = 2, 16  # long-context's conversations at once: at least, at most
LONG_ANSWER = 256  # long-context's answers, at most: a long decode on a long prompt


@dataclass(frozen=True, slots=True)
class Reference:
    """What the `steady` phase measured, which later phases are sized from."""

    requests_per_s: float  # completed requests per second at steady's concurrency
    measured: bool  # False: DEFAULT_RATE, no steady phase measured it


@dataclass(frozen=True, slots=True)
class Traffic:
    """A phase's profile, and whether the run scales it to the target (--fit)."""

    profile: Profile
    fit: bool


Build = Callable[[Profile, Capabilities, Reference], "Traffic | str"]


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    traffic: str  # what it sends, in a sentence
    build: Build


def _profile(base: Profile, name: str, workload: dict[str, Any], load: dict[str, Any],
             verdict: dict[str, Any] | None = None, chaos: list[dict[str, Any]] | None = None) -> Profile:
    """The base profile with the phase's workload (a new one, the base's seed kept), its load keys over the base's,
    and its faults on purpose instead of the base's."""
    data = base.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["name"] = f"stress-{name}"
    data["description"] = f"The stress battery's {name} phase"
    data["workload"] = {"seed": base.workload.seed, **workload}
    data["load"] = {**{k: v for k, v in data["load"].items() if k in _LOAD_KEPT}, **load}
    data["verdict"] = {**data["verdict"], **(verdict or {})}
    data["chaos"] = {"events": chaos or []}
    data["phases"] = []  # the battery's, not the phase's
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"the {name} phase's profile is not valid: {exc}") from exc


# The base's [load] keys a phase keeps (how long a request may take); the rest is the phase's traffic.
_LOAD_KEPT = frozenset({"request_timeout_s", "stall_timeout_s", "ttft_timeout_s", "max_retries", "stop_on_death",
                        "keep_records", "checkpoint_s"})


def _chats(caps: Capabilities, conversations: int, turns: int = 2, prefix: int = 512, max_tokens: int = 32,
           **more: Any) -> dict[str, Any]:
    """Prefix-shared conversations: a warm-up that fills the prefix, then follow-ups that reuse it; the longest
    request at most ORDINARY_SHARE of what one may hold on the target (the prefix gives way), so that a target
    whose tokens loadrepro can only estimate (a llama.cpp without /apply-template: estimates off by half again)
    still takes each one whole. Only long-context and oversize go near the limit, on purpose."""
    later = (turns - 1) * (TURN_TOKENS + OVERRUN_TURN_OVERHEAD)
    if (budget := _budget(caps)) is not None:
        prefix = min(prefix, max(LEAST_PREFIX, int(ORDINARY_SHARE * budget) - later - max_tokens))
    return {"kind": "conversations", "conversations": conversations, "turns": turns, "prefix_tokens": prefix,
            "turn_tokens": TURN_TOKENS, "max_tokens": max_tokens, "warm_max_tokens": 1, "ignore_eos": True, **more}


def _budget(caps: Capabilities) -> int | None:
    """The most one request may hold on the target: its context, or its KV pool when that is smaller."""
    return min((x for x in (caps.max_model_len, caps.kv_pool_tokens) if x is not None), default=None)


def _sized(caps: Capabilities) -> bool:
    """Whether --fit can scale a phase to the target: it publishes a context or a KV pool."""
    return caps.max_model_len is not None or caps.kv_limits is not None


def steady(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    return Traffic(_profile(base, "steady", _chats(caps, 16), {"arrival": "closed", "concurrency": 4}), _sized(caps))


def burst(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    n = 32
    load = {"arrival": "bursts", "burst_size": n, "idle_s": 2.0, "concurrency": n}
    return Traffic(_profile(base, "burst", _chats(caps, n, turns=1, max_tokens=16), load), _sized(caps))


def microburst(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    size, bursts = 8, 6
    # on average three quarters of what steady served: the bursts, not a rate beyond the engine's, make the queue
    every = round(size / (0.75 * ref.requests_per_s), 3)
    load = {"arrival": "bursts", "burst_size": size, "burst_every_s": max(0.05, every), "concurrency": size * bursts}
    workload = _chats(caps, size * bursts, turns=1, max_tokens=16)
    return Traffic(_profile(base, "microburst", workload, load), _sized(caps))


def zigzag(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    """A rate from a quarter of steady's to one and a half times it and back, three times: on average below what
    steady served, so an engine that keeps up on average drains each peak's queue in the trough after it. Judged by
    what fails under a varying rate (failures, stalls, death), not by degradation: the periods of Poisson arrivals
    differ by chance, and a period's TTFT p95 against another's said chance (vLLM 0.20.0: 138 ms against 24 ms)."""
    r, periods = ref.requests_per_s, 3
    low, high = 0.25 * r, 1.5 * r
    period = max(4.0, MIN_WINDOW_REQUESTS / ((low + high) / 2))
    n = max(12, round((low + high) / 2 * period * periods))
    load = {"arrival": "zigzag", "rate": high, "rate_low": low, "period_s": round(period, 3), "concurrency": 256}
    return Traffic(_profile(base, "zigzag", _chats(caps, n, turns=1, max_tokens=16), load), _sized(caps))


def ramp_recovery(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    """Half steady's rate, then twice it for two windows (past what steady served), then half again for long
    enough to drain that backlog twice over: the last windows must be served as the first were (rule degradation,
    windows of a few requests each). A backlog of (2 - 1) x rate x 2 windows drains at (1 - 0.5) x rate in 4
    windows; the last 8 windows leave it 4 more. Steady's own conversations (a warm-up that fills the prefix, a
    follow-up that reuses it), so that its rate is one of requests as heavy as those steady measured: one request
    a conversation, each a prefix to fill, costs an engine whose prefill dominates (llama.cpp on a CPU) more, and
    the backlog of twice the rate may never drain (served at 0.64 of steady's rate: in 19 windows)."""
    low, high = 0.5 * ref.requests_per_s, 2.0 * ref.requests_per_s
    window = max(1.0, MIN_WINDOW_REQUESTS / low)
    steps = [{"seconds": 3 * window, "rate": low / RAMP_TURNS}, {"seconds": 2 * window, "rate": high / RAMP_TURNS},
             {"seconds": 8 * window, "rate": low / RAMP_TURNS}]
    n = round(sum(s["seconds"] * s["rate"] for s in steps))
    load = {"arrival": "series", "rates": steps, "concurrency": 512}
    return Traffic(_profile(base, "ramp-recovery", _chats(caps, n, turns=RAMP_TURNS), load,
                            verdict={"window_s": window}), _sized(caps))


def connection_churn(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    load = {"arrival": "closed", "concurrency": 8, "fresh_connections": True}
    # half of them whole answers: some servers (llama.cpp) close a stream's connection after it anyway
    workload = _chats(caps, 64, turns=1, max_tokens=8, stream=0.5)
    return Traffic(_profile(base, "connection-churn", workload, load), _sized(caps))


def cancel_storm(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    """As many long answers at once as the concurrency; once they are under way every request in flight is
    abandoned (mid-answer first, then those the engine queued), and two more conversations follow alone: an engine
    that goes on with what was abandoned runs more than they (rules zombie_requests, no_recovery). The traffic after
    is light on purpose: a full load would hide the zombies among its own requests."""
    n = 16
    # due at once: an abort burst waits for answers to be under way (load/arrivals.py), then cancels
    chaos = [{"at_s": 0.1, "action": "abort_burst", "count": n, "recover_within_s": 30.0}]
    load = {"arrival": "closed", "concurrency": n}
    return Traffic(_profile(base, "cancel-storm", _chats(caps, n + 2, turns=1, max_tokens=128), load, chaos=chaos),
                   _sized(caps))


def long_context(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    if not _sized(caps):
        return "the target publishes no context length and no KV pool: prompts near its limit cannot be sized"
    n = _over_the_pool(caps)
    longest = _budget(caps) or 0
    answer = max(16, min(LONG_ANSWER, longest // 16))
    # the prefix fills the rest of 90% of the longest request (a follow-up's 64 tokens and its reply beside it);
    # --fit holds it there should the chat template or a count differ
    prefix = max(128, int(0.9 * longest) - answer - 64 - 40)
    workload = {**_chats(caps, n, max_tokens=answer), "prefix_tokens": prefix}  # near the limit, on purpose
    return Traffic(_profile(base, "long-context", workload, {"arrival": "closed", "concurrency": n}), True)


def _over_the_pool(caps: Capabilities) -> int:
    """Conversations of requests near the longest the target takes, all at once, that need PRESSURE x its KV pool
    (where it publishes one; else LONG_AT_ONCE): admission must queue what the pool cannot hold."""
    longest = _budget(caps) or 0
    if caps.kv_pool_tokens is None or not longest:
        return LONG_AT_ONCE
    return max(LONG_AT_ONCE, min(MAX_LONG, -(-int(PRESSURE * caps.kv_pool_tokens) // int(0.9 * longest))))


def oversize(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    if not _sized(caps):
        return "the target publishes no context length and no KV pool: a request just past them cannot be sized"
    chaos = [{"at_s": 0.5, "action": "oversize"}, {"at_s": 1.5, "action": "oversize"}]
    load = {"arrival": "closed", "concurrency": 4}
    return Traffic(_profile(base, "oversize", _chats(caps, 12), load, chaos=chaos), True)


def malformed(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    chaos = [{"at_s": 0.5, "action": "malformed", "kind": "all", "count": 2}]
    return Traffic(_profile(base, "malformed", _chats(caps, 12), {"arrival": "closed", "concurrency": 4}, chaos=chaos),
                   _sized(caps))


def structured(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    if caps.structured_outputs is False:
        return f"the {caps.flavour} takes no structured outputs: it answers free text whatever a request asks"
    if caps.structured_outputs is None:
        return (f"whether the target ({caps.flavour} engine) honours a JSON schema cannot be told: it is not "
                "llama.cpp, vLLM or SGLang; a [[phases]] entry with profile = a profile of structured_share = 1 "
                "runs such traffic anyway")
    workload = _chats(caps, 16, turns=1, max_tokens=96, structured_share=1.0, structured_format="json_schema")
    return Traffic(_profile(base, "structured", workload, {"arrival": "closed", "concurrency": 8}), _sized(caps))


def agentic(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
    """Seeded agent sessions: tool turns, subagents spawned and joined, compaction near the target's context."""
    budget = _budget(caps)  # a KV pool smaller than the context holds a session's last request whole
    def scaled(share: int, least: int, most: int) -> int:
        return most if budget is None else max(least, min(most, budget // share))
    system, task, reply = scaled(8, 64, 1024), scaled(16, 16, 128), scaled(32, 8, 32)
    agents: dict[str, Any] = {"agents": 4, "turns": 4, "system_tokens": system, "task_tokens": task,
                              "tool_result_tokens": task, "reply_tokens": reply, "tool_latency_s": 0.1,
                              "subagent_probability": 0.5, "subagent_fanout": 2, "subagent_turns": 2,
                              "summary_tokens": task, "block_tokens": min(64, max(16, task))}
    # compacted at the share of the budget the ordinary phases hold, where that leaves room for the system prompt,
    # the task, a summary and a block
    if budget is not None and int(ORDINARY_SHARE * budget) >= system + 2 * task + agents["block_tokens"]:
        agents["context_limit_tokens"] = int(ORDINARY_SHARE * budget)
    workload = {"kind": "agents", "agents": agents, "ignore_eos": True}
    return Traffic(_profile(base, "agentic", workload, {"arrival": "closed", "concurrency": 4,
                                                        "concurrency_unit": "session"}), False)


def _not_sent(what: str) -> Build:
    def build(base: Profile, caps: Capabilities, ref: Reference) -> Traffic | str:
        return f"loadrepro does not send {what} yet"
    return build


PHASES: tuple[Phase, ...] = (
    Phase("steady", "prefix-shared conversations, a few at once: the reference the others are sized from", steady),
    Phase("burst", "after an idle spell, every conversation at once", burst),
    Phase("microburst", "short bursts on a rhythm, three quarters of what steady served on average", microburst),
    Phase("zigzag", "Poisson arrivals whose rate goes from a quarter of steady's up to one and a half times it and "
          "down, three times", zigzag),
    Phase("ramp-recovery", "half steady's rate, then twice it (past what steady served), then half again until the "
          "backlog drained: the last windows must be served as the first were", ramp_recovery),
    Phase("connection-churn", "every request on a new connection, closed after its answer", connection_churn),
    Phase("cancel-storm", "every request in flight abandoned at once, mid-answer and queued, then two more "
          "conversations alone", cancel_storm),
    Phase("long-context", "prompts near the longest the target takes", long_context),
    Phase("oversize", "requests just past what the target can hold, among normal ones: refused cleanly", oversize),
    Phase("malformed", "requests no client should send (bad UTF-8, cut JSON, wrong types, a huge body, negative "
          "max_tokens), each on its own connection, among normal ones", malformed),
    Phase("structured", "answers held to a JSON schema (response_format)", structured),
    Phase("agentic", "seeded agent sessions: tool turns, subagents spawned and joined", agentic),
    Phase("priority", "classes of traffic at different priorities", _not_sent("priority classes")),
    Phase("adapters", "a mix of LoRA adapters", _not_sent("a mix of models or adapters")),
    Phase("multimodal", "chat requests with images", _not_sent("image parts")),
)
BY_NAME = {p.name: p for p in PHASES}
RATE_PHASES = frozenset({"microburst", "zigzag", "ramp-recovery"})  # sized from steady's measured rate
