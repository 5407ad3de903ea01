"""Rules over what the engine admitted and reused against what the plan says it should: clean refusals
(rejections), throttling, prefix reuse (prefix_reuse_missing), and admission against the KV arithmetic
(capacity_mismatch). Pure."""

from __future__ import annotations

from loadrepro.config.capacity import never_whole
from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Finding, Severity, quote
from loadrepro.records import REUSE_SCALE, Outcome, RunResult
from loadrepro.schema.report_kinds import NOTHING_FIT


def rejections(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Requests refused cleanly at admission (4xx with a context or capacity message). Correct behaviour for a
    request that can never fit: info, or a failure when `allow_rejected = false`."""
    hits = [r for r in result.records if r.outcome is Outcome.REJECTED]
    if not hits:
        return None
    severity = Severity.INFO if spec.allow_rejected else Severity.FAIL
    return Finding("rejections", severity, f"{len(hits)} requests rejected at admission: {quote(hits[0].detail)}")


_REFUSED = (Outcome.REJECTED.value, Outcome.CANCELLED.value)  # a run's end cancels what it had not sent


def nothing_fit(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Every request refused at admission, and not one of them one the target's published limits say could be
    served whole (prompt + max_tokens beyond its longest sequence: max_model_len, a llama.cpp slot's n_ctx). The
    engine did its job, and the run tested nothing but its refusals: it must not pass. A run whose requests fit
    the longest sequence but never the KV pools is not one: refusing them cleanly is the admission it tests (a
    shrunk reproducer of a crash on such a request, sent to the fixed engine). Not the engine's failure
    either: `loadrepro run` exits 2 (the profile does not fit this target), and `--fit` scales the workload to it.
    Needs a published limit (a run without one is judged by `rejections`); judged on the records kept.

    Facts: `refused` of `requests`, `largest_tokens` (the largest request's prompt + max_tokens), `context_tokens`
    (0: unknown)."""
    counts = result.totals(spec.window_s).by_outcome
    requests = sum(counts.values())
    refused = counts.get(Outcome.REJECTED.value, 0)
    if not refused or sum(counts.get(o, 0) for o in _REFUSED) < requests:
        return None
    predicted = {(p.conversation, p.turn): p for p in result.predictions}
    context = result.context[0] if result.context is not None else None
    sized = [(r.expected_prompt_tokens + r.max_tokens, predicted.get((r.conversation, r.turn)))
             for r in result.records]
    if (context is None and not predicted) or not sized or \
            not all(never_whole(tokens, context, fit) for tokens, fit in sized):
        return None
    largest = max(tokens for tokens, _ in sized)
    limit = (f"the {context:,} tokens a request may have ({result.context[1]})" if result.context is not None
             else f"the KV limits ({result.limits.source})" if result.limits is not None else "the KV limits")
    return Finding(NOTHING_FIT, Severity.FAIL,
                   f"the run tested nothing: not one request fit the target, and it refused all {refused} (up to "
                   f"{largest:,} tokens of prompt and output a request, against {limit}); not the engine's failure: "
                   "the profile does not fit this target (rerun with --fit to scale it)",
                   {"refused": refused, "requests": requests, "largest_tokens": largest,
                    "context_tokens": context or 0})


def throttling(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Requests still refused with 429 or 503 + Retry-After after their retries (info), and how often retried."""
    totals = result.totals(spec.window_s)
    retried, hits = totals.retries, totals.by_outcome.get(Outcome.THROTTLED.value, 0)
    if not hits and not retried:
        return None
    return Finding("throttling", Severity.INFO, f"{hits} requests throttled after retries; {retried} retries")


def prefix_reuse_missing(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """With `min_cache_hit` > 0 and a target that reports cached tokens: every completed request with a shared
    prefix (turns after the first) must report cached tokens >= min_cache_hit x that prefix. A turn that cannot
    find it expects nothing: one sent to another replica than its conversation's turn before (round-robin
    routing), or after a fault restarted the engine."""
    if spec.min_cache_hit <= 0:
        return None
    totals = result.totals(spec.window_s)  # every request, kept in memory or not
    later = sum(count for count, *_ in totals.reuse.values())
    if not later:
        return None
    if not totals.reuse_reported:
        return Finding("prefix_reuse_missing", Severity.INFO, "the target reports no cached tokens, so prefix reuse "
                       "was not checked (vLLM: --enable-prompt-tokens-details; SGLang: --enable-cache-report)")
    limit = round(spec.min_cache_hit * REUSE_SCALE)
    short = [first for share, first in totals.reuse.items() if share < limit]
    if not short:
        return None
    _, request, cached, shared = min(short, key=lambda first: first[1])
    return Finding("prefix_reuse_missing", Severity.FAIL,
                   f"{sum(count for count, *_ in short)}/{later} later turns found less than {spec.min_cache_hit:.0%} "
                   f"of their shared prefix in the cache (request {request}: {cached} of {shared} tokens)")


def capacity_mismatch(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Admission that disagrees with the KV arithmetic: a request predicted `never_fits` that was not cleanly
    rejected (the engine crashed, stalled or retried instead: the seed-001 defect), or one predicted `fits` that
    was rejected. A request longer than the longest sequence the target takes, served with its answer cut where
    that ends (finish_reason length), is no disagreement: the engine admitted only what it holds. Threshold: one
    request either way; needs the target's limits. Counted over every request, kept in memory or not."""
    counts = result.totals(spec.window_s).capacity
    if counts is None:
        return None
    parts = []
    if (first := counts.unrejected.first) is not None:
        p = counts.prediction(first)
        parts.append(f"{counts.unrejected.count} requests that can never fit ({p.limit}) were not rejected at "
                     f"admission (request {first.id}, {p.tokens} tokens: {first.outcome})")
    if (first := counts.refused.first) is not None:
        parts.append(f"{counts.refused.count} requests that fit were rejected (request {first.id}, "
                     f"{counts.prediction(first).tokens} tokens)")
    if not parts:
        return None
    return Finding("capacity_mismatch", Severity.FAIL, "; ".join(parts))
