"""What the target's limits make of a run's profile: the size of a [[chaos.events]] oversize request, the
capacity model's prediction for each planned request, --size-to-overrun's conversations and prefixes, how many
planned requests fit the target at all (said before the load), and --fit's workload scaled to the target."""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from loadrepro.config.capacity import (
    EngineLimits,
    Prediction,
    never_whole,
    predict,
    prefix_for_overrun,
    smallest_pool_tokens,
)
from loadrepro.config.profile import Profile
from loadrepro.config.workload_spec import WorkloadSpec
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


FIT_SHARE = 0.9  # of what one request may hold, for --fit's longest request: a chat template and a count's error
FIT_MIN_TOKENS = 16  # --fit keeps every later turn's tokens and every answer at least this long
FIT_MIN_PREFIX = 128  # the least prefix a prompt holds: system prompt, question, template (about 80) and records
_OTHERS = "the others will be refused, or have their answers cut at its context"  # as engines differ
FEW_FIT = 0.5  # fewer than this share of the planned requests fitting the target is said before the load


def unfit_warning(plan: Plan, predicted: tuple[Prediction, ...], context: tuple[int, str] | None) -> str | None:
    """Before the load: how few of the planned requests the target's published limits say can be served whole
    (none, or fewer than FEW_FIT of them), against what it publishes, and the fix; None when most fit or nothing
    is published."""
    if context is None and not predicted:
        return None
    fits = {(p.conversation, p.turn): p for p in predicted}
    requests = plan.workload.requests
    sizes = [(r.expected_prompt_tokens, r.max_tokens) for r in requests]
    fitting = sum(not never_whole(prompt + out, context[0] if context else None, fits.get((r.conversation, r.turn)))
                  for r, (prompt, out) in zip(requests, sizes, strict=True))
    if not requests or fitting >= FEW_FIT * len(requests):
        return None
    prompts = sorted(prompt for prompt, _ in sizes)
    largest = max(prompt + out for prompt, out in sizes)
    published = (f"the target takes {context[0]:,} tokens a request ({context[1]})" if context is not None
                 else "its KV limits allow no longer sequence")
    said = "none" if not fitting else f"only {fitting}"
    return (f"fit: {said} of the {len(requests)} planned requests fit the target: prompts of {prompts[0]:,} to "
            f"{prompts[-1]:,} tokens, up to {largest:,} with the output asked, and {published}; "
            f"{'the run will test nothing but its refusals' if not fitting else _OTHERS}. "
            "Rerun with --fit to scale prompts, turns and max_tokens to the target")


def fitted(profile: Profile, limits: EngineLimits | None, context: tuple[int, str] | None,
           engine_cmd: str | None = None) -> tuple[Profile, str]:
    """--fit: the profile with its prefixes, later turns and answers scaled by one factor (turns dropped only when
    the smallest of those is still too long) so that its longest request holds FIT_SHARE of what one request may
    have on this target (its longest sequence, a slot's context, its KV pool); and what it changed, in words, with
    a warning when llama.cpp's slots may share one pool (`engine_cmd`, when loadrepro started it, may say not)."""
    w = profile.workload
    if w.kind != "conversations":
        raise UsageError("--fit sizes conversation workloads, not trace or agent replays")
    budget, why = _budget(limits, context)
    room = int(budget * FIT_SHARE)
    before = longest_request(w)
    if before <= room:
        return profile, (f"fit: the longest request ({before:,} tokens of prompt and output) already fits "
                         f"{why}; nothing changed")
    fixed = (w.turns - 1) * OVERRUN_TURN_OVERHEAD  # the replies and templates of later turns do not scale
    fitted_spec = _scaled(w, max(0.0, (room - fixed) / (before - fixed)))
    # Rounding and the least lengths may leave it long: the prefix gives way first, then the later turns' tokens,
    # then the answer; a turn is dropped only when all are at their least, and the answer then goes down to one token.
    fitted_spec = _given_way(fitted_spec, room, "prefix_tokens", FIT_MIN_PREFIX)
    fitted_spec = _given_way(fitted_spec, room, "turn_tokens", FIT_MIN_TOKENS)
    fitted_spec = _given_way(fitted_spec, room, "max_tokens", FIT_MIN_TOKENS)
    while longest_request(fitted_spec) > room and fitted_spec.turns > 1:
        fitted_spec = fitted_spec.model_copy(update={"turns": fitted_spec.turns - 1})
    fitted_spec = _given_way(fitted_spec, room, "max_tokens", 1)
    if longest_request(fitted_spec) > room:
        raise UsageError(f"--fit: {why} is too small for a {fitted_spec.prefix_tokens}-token prefix")
    changed = [f"{key} {getattr(w, key):,} -> {getattr(fitted_spec, key):,}"
               for key in ("prefix_tokens", "prefix_tokens_p95", "group_prefix_tokens", "turns", "turn_tokens",
                           "max_tokens", "warm_max_tokens") if getattr(w, key) != getattr(fitted_spec, key)]
    said = (f"fit: scaled to {why}: the longest request {before:,} -> {longest_request(fitted_spec):,} tokens of "
            f"prompt and output (at most {FIT_SHARE:.0%} of it); {', '.join(changed)}")
    shared = llamacpp_shared_pool(engine_cmd)
    if context is not None and "llama.cpp" in context[1] and profile.load.concurrency > 1 and shared != (False, ""):
        said += ("; " + (f"llama.cpp's slots share one KV pool of a slot's context ({shared[1]}): requests"
                         if shared else "llama.cpp does not publish whether its slots share one KV pool of a "
                                        "slot's context (they do without -np): if they do, requests")
                 + " at once overflow it, and llama.cpp fails them mid-stream (rule failures_while_healthy; "
                 "profile llamacpp-unified-pool)")
    if limits is not None:
        at_once = min(profile.load.concurrency, fitted_spec.conversations) * longest_request(fitted_spec)
        said += (f"; {min(profile.load.concurrency, fitted_spec.conversations)} at once need up to {at_once:,} of "
                 f"the KV pool's {smallest_pool_tokens(limits):,} tokens")
    return profile.model_copy(update={"workload": fitted_spec}), said


def _budget(limits: EngineLimits | None, context: tuple[int, str] | None) -> tuple[int, str]:
    """The most one request may hold on the target, and what says so in words."""
    bounds = []
    if context is not None:
        bounds.append((context[0], f"the {context[0]:,} tokens a request may have ({context[1]})"))
    if limits is not None:
        bounds.append((limits.max_seq_len, f"its longest sequence of {limits.max_seq_len:,} tokens ({limits.source})"))
        bounds.append((smallest_pool_tokens(limits), f"its KV pool of {smallest_pool_tokens(limits):,} tokens "
                                                     f"({limits.source})"))
    if not bounds:
        raise UsageError("--fit sizes the workload to the target's limits, and it publishes none (no max_model_len "
                          "in /v1/models, no n_ctx in /props, no KV pool in /metrics): set [engine] max_seq_len")
    return min(bounds, key=lambda bound: bound[0])  # at a tie, what a request is said to take


def llamacpp_shared_pool(engine_cmd: str | None) -> tuple[bool, str] | None:
    """Whether llama-server, started by `engine_cmd`, runs its slots on one KV pool, and the flag that says so:
    -kvu/--kv-unified, or no -np/--parallel (auto slots: unified by default in 0.3.36); not with -np N or -no-kvu.
    None when no command is known (a target at --base-url) or it cannot be read. The last flag given wins."""
    try:
        words = shlex.split(engine_cmd) if engine_cmd else None
    except ValueError:
        words = None
    if words is None:
        return None
    unified: tuple[bool, str] | None = None
    slots: str | None = None
    for i, word in enumerate(words):
        key, _, value = word.partition("=")
        if key in ("-kvu", "--kv-unified", "--kv-unified-per-slot", "LLAMA_ARG_KV_UNIFIED_PER_SLOT"):
            unified = (True, f"{key} in the engine command")
        elif key in ("-no-kvu", "--no-kv-unified"):
            unified = (False, "")
        elif key in ("-np", "--parallel", "LLAMA_ARG_N_PARALLEL"):
            slots = value or (words[i + 1] if i + 1 < len(words) else "")
    if unified is not None:
        return unified
    if slots is None or slots.strip() == "-1":
        return True, "no -np/--parallel in the engine command: llama.cpp's default is one unified pool"
    return False, ""


def longest_request(w: WorkloadSpec) -> int:
    """A conversation's last (longest) request: its prefix, every later turn (a reply and a tool result) and the
    answer asked of it."""
    prefix = max(w.prefix_tokens, w.prefix_tokens_p95) + (w.group_prefix_tokens if w.groups else 0)
    return prefix + (w.turns - 1) * (w.turn_tokens + OVERRUN_TURN_OVERHEAD) + w.max_tokens


def _given_way(w: WorkloadSpec, room: int, key: str, least: int) -> WorkloadSpec:
    """`w` with `key` (a length the longest request holds once, or once a later turn) shortened, no further than
    `least` nor lengthened to it, until the longest request fits `room`."""
    over = longest_request(w) - room
    now = getattr(w, key)
    if over <= 0 or now <= least:
        return w
    times = w.turns - 1 if key == "turn_tokens" else 1
    if not times:
        return w
    shorter = max(least, now - -(-over // times))
    update: dict[str, int] = {key: shorter}
    if key == "prefix_tokens" and w.prefix_tokens_p95 <= shorter:
        update["prefix_tokens_p95"] = 0
    if key == "max_tokens":
        update["warm_max_tokens"] = min(w.warm_max_tokens, shorter)
    return w.model_copy(update=update)


def _scaled(w: WorkloadSpec, factor: float) -> WorkloadSpec:
    """Every length scaled by `factor`, none below its least (nor raised to it)."""
    def scaled(tokens: int, least: int) -> int:
        return max(min(tokens, least), int(tokens * factor))

    prefix = scaled(w.prefix_tokens, FIT_MIN_PREFIX)
    p95 = int(w.prefix_tokens_p95 * factor)
    answer = scaled(w.max_tokens, FIT_MIN_TOKENS)
    return w.model_copy(update={
        "prefix_tokens": prefix, "prefix_tokens_p95": p95 if p95 > prefix else 0,
        "group_prefix_tokens": int(w.group_prefix_tokens * factor),
        "turn_tokens": scaled(w.turn_tokens, FIT_MIN_TOKENS),
        "max_tokens": answer, "warm_max_tokens": min(w.warm_max_tokens, answer)})
