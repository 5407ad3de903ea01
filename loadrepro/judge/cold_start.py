"""A cold start: an engine's first requests after it became ready stall while it compiles kernels or allocates its
buffers, and the same requests pass once it has served a few (vLLM's CPU backend: the first run 40 s after its start
stalled every request; the same command 20 s later passed in 2.4 s). Said beside the stalls, not instead of them: a
fresh engine that stalls is still the engine stalling, and a bug that strikes only the first requests looks the
same. `[load] warmup_requests` tells the two apart: with warm-ups sent first, a cold start does not stall the run."""

from __future__ import annotations

from collections.abc import Sequence

from loadrepro.records import Outcome, RequestRecord, RunResult

COLD_START_S = 60.0  # the first seconds of a fresh engine: stalls of requests sent later are not its cold start


def cold_start_s(result: RunResult, stalled: Sequence[RequestRecord]) -> float | None:
    """Seconds from the engine becoming ready to the sending of the last stalled request, when every stalled request
    was sent within COLD_START_S of it and before the engine had answered any request; None otherwise, or when the
    engine's readiness is not known (a target at a URL) or a warm-up answered before the load."""
    if result.fresh_engine_ns is None or not stalled:
        return None
    last_sent = max(r.sent_or_queued_ns for r in stalled)
    first_answer = min((r.end_ns for r in result.records if r.outcome is Outcome.OK), default=None)
    if first_answer is not None and last_sent >= first_answer:
        return None  # the engine had served a request before this one stalled: it was warm by then
    since_s = (last_sent - result.fresh_engine_ns) / 1e9
    return round(since_s, 1) if 0 <= since_s <= COLD_START_S else None


def cold_start_words(since_s: float) -> str:
    return (f"every stalled request was sent within {since_s:g} s of the engine becoming ready, before it had "
            "answered any of the run's: a cold start may be the cause ([load] warmup_requests sends requests before "
            "the load, not judged)")
