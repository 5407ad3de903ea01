"""A cold start: an engine's first requests after it became ready stall while it compiles kernels or allocates its
buffers, and the same requests pass once it has served a few (vLLM's CPU backend: the first run 40 s after its start
stalled every request; the same command 20 s later passed in 2.4 s). Said beside the stalls, not instead of them: a
fresh engine that stalls is still the engine stalling, and a bug that strikes only the first requests looks the
same. `[load] warmup_requests` tells the two apart: with warm-ups sent first, a cold start does not stall the run.

An engine is known fresh when loadrepro started it and nothing answered before the load (RunResult.fresh_engine_ns:
its first /health 200), or, for a target at a URL, when its /metrics counted no finished request at the run's first
scrape (vLLM's request_success_total: it had served nothing, warm-ups included, since it started)."""

from __future__ import annotations

from collections.abc import Sequence

from loadrepro.records import ENGINE_FINISHED, Outcome, RequestRecord, RunResult

COLD_START_S = 60.0  # the first seconds of a fresh engine: stalls of requests sent later are not its cold start


def _fresh_since_ns(result: RunResult) -> int | None:
    """Since when the engine is known fresh: its readiness, or the run's start for a target at a URL whose first
    scrape counted no finished request."""
    if result.fresh_engine_ns is not None:
        return result.fresh_engine_ns
    if result.engine_cmd is not None:
        return None  # an engine loadrepro started that was warmed before the load
    first = next((m for m in result.metrics if ENGINE_FINISHED in m.values), None)
    return result.start_ns if first is not None and first.values[ENGINE_FINISHED] == 0 else None


def cold_start_s(result: RunResult, stalled: Sequence[RequestRecord]) -> float | None:
    """Seconds from the engine being known fresh to the sending of the last stalled request, when every stalled
    request was sent within COLD_START_S of it and before the engine had answered any of the run's requests; None
    otherwise, or when the engine is not known fresh."""
    since = _fresh_since_ns(result)
    if since is None or not stalled:
        return None
    last_sent = max(r.sent_or_queued_ns for r in stalled)
    first_answer = min((r.end_ns for r in result.records if r.outcome is Outcome.OK), default=None)
    if first_answer is not None and last_sent >= first_answer:
        return None  # the engine had served a request before this one stalled: it was warm by then
    since_s = (last_sent - since) / 1e9
    return round(max(since_s, 0.0), 1) if since_s <= COLD_START_S else None


def cold_start_words(result: RunResult, since_s: float) -> str:
    fresh = "the engine becoming ready" if result.fresh_engine_ns is not None else \
        "the run's start, against an engine whose /metrics had counted no finished request"
    return (f"every stalled request was sent within {since_s:g} s of {fresh}, before it had answered any of the "
            "run's: a cold start may be the cause ([load] warmup_requests sends requests before the load, not judged)")
