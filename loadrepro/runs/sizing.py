"""What the target's limits make of a run's profile: the size of a [[chaos.events]] oversize request, the
capacity model's prediction for each planned request, and --size-to-overrun's conversations and prefixes."""

from __future__ import annotations

from collections.abc import Iterable

from loadrepro.config.capacity import EngineLimits, Prediction, predict, prefix_for_overrun, smallest_pool_tokens
from loadrepro.config.profile import Profile
from loadrepro.errors import TargetError, UsageError
from loadrepro.load.chaos import Oversize, oversize
from loadrepro.runs.progress import Say
from loadrepro.workload.plan import Plan

OVERRUN_TURN_OVERHEAD = 40  # reply and template tokens a later turn adds beside its tool result
OVERRUN_MIN_PREFIX = 256


def oversize_for(profile: Profile, limits: EngineLimits | None, longest: tuple[int, str] | None) -> Oversize | None:
    """The prompt of a [[chaos.events]] oversize request: beyond the target's KV limits, or without them its
    longest sequence; UsageError (the profile cannot run on this target) when it publishes neither."""
    if not any(e.action == "oversize" for e in profile.chaos.events):
        return None
    if limits is not None:
        return oversize(limits.max_seq_len, smallest_pool_tokens(limits), limits.source)
    if longest is None:
        raise UsageError("[[chaos.events]] oversize sends a request just beyond what the engine can hold, and the "
                         "target publishes no limit (no max_model_len in /v1/models, no n_ctx in /props, no KV "
                         "pool in /metrics): set [engine] max_seq_len to its longest sequence")
    return oversize(longest[0], None, longest[1])


def predictions(plan: Plan, profile: Profile, limits: EngineLimits | None) -> tuple[Prediction, ...]:
    return predicted(((r.conversation, r.turn, r.expected_prompt_tokens + r.max_tokens)
                      for r in plan.workload.requests), profile.load.concurrency, limits)


def predicted(requests: Iterable[tuple[int, int, int]], concurrency: int,
              limits: EngineLimits | None) -> tuple[Prediction, ...]:
    """The capacity model's prediction for each (conversation, turn, prompt + max_tokens) planned."""
    if limits is None:
        return ()
    return tuple(Prediction(conversation, turn, *predict(tokens, concurrency, limits), tokens)
                 for conversation, turn, tokens in requests)


def overrun(profile: Profile, limits: EngineLimits | None, factor: float, say: Say) -> Profile:
    """The profile with conversations and prefix length chosen so the run needs `factor` x the binding pool."""
    w = profile.workload
    if limits is None:
        raise TargetError("--size-to-overrun needs the target's KV limits: it publishes none, so add an [engine] "
                          "section to the profile")
    if w.kind != "conversations":
        raise UsageError("--size-to-overrun sizes conversation workloads, not trace replays")
    later = (w.turns - 1) * (w.turn_tokens + OVERRUN_TURN_OVERHEAD)
    conversations = w.conversations
    prefix = prefix_for_overrun(factor, conversations, later, w.max_tokens, limits)
    while prefix + later + w.max_tokens > limits.max_seq_len:  # too long for one request: more conversations
        conversations += 1
        prefix = prefix_for_overrun(factor, conversations, later, w.max_tokens, limits)
    while prefix < OVERRUN_MIN_PREFIX and conversations > 1:
        conversations -= 1
        prefix = prefix_for_overrun(factor, conversations, later, w.max_tokens, limits)
    if prefix < OVERRUN_MIN_PREFIX:
        raise UsageError(f"--size-to-overrun {factor}: the pool is too small for a {OVERRUN_MIN_PREFIX}-token prefix")
    say(f"size-to-overrun {factor}: {conversations} conversations x {prefix:,}-token prefixes "
        f"(+{later:,} later-turn tokens, up to {w.max_tokens:,} output) = {factor} x the binding pool of "
        f"{smallest_pool_tokens(limits):,} tokens ({limits.source})")
    workload = w.model_copy(update={"conversations": conversations, "prefix_tokens": prefix, "groups": 0,
                                    "prefix_tokens_p95": 0})
    return profile.model_copy(update={"workload": workload})
