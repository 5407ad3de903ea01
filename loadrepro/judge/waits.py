"""What requests that got no first token were waiting behind, read from the engine's metrics scraped while they
waited: requests the engine ran that loadrepro was not sending (zombies holding its capacity, as after cancelled
streams an engine kept), or loadrepro's own requests filling every slot (queueing: slow, not a fault). Pure."""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass

from loadrepro.records import RUNNING, WAITING, MetricsSample, Outcome, RequestRecord, RunResult


@dataclass(frozen=True, slots=True)
class Wait:
    """Why requests waited: the words, and `why` as a name a rule's facts carry (`held`: by requests loadrepro was
    not sending, `queued`: behind its own; for timeouts, `queueing` or `unexplained`)."""

    why: str
    words: str
    cancelled: int = 0  # held: the requests loadrepro had cancelled before, that the engine seemed to keep running


_HELD_SHARE = 0.5  # of the scrapes during the wait that must show the engine running more than loadrepro sent
_LEAST_SCRAPES = 2  # a single scrape can fall between a request's end and the engine freeing it


def _during(result: RunResult, waited: list[RequestRecord]) -> list[MetricsSample]:
    start = min(r.sent_ns or r.queued_ns for r in waited)
    end = max(r.end_ns for r in waited)
    return [m for m in result.metrics if start <= m.t_ns <= end and m.in_flight is not None
            and m.values.get(RUNNING) is not None]


class _Answering:
    """How many of loadrepro's requests were receiving their answer (first token in, not ended) at a moment."""

    def __init__(self, records: tuple[RequestRecord, ...]) -> None:
        answered = [r for r in records if r.first_token_ns is not None]
        self._began = sorted(r.first_token_ns for r in answered if r.first_token_ns is not None)
        self._ended = sorted(r.end_ns for r in answered)

    def at(self, t_ns: int) -> int:
        return bisect.bisect_right(self._began, t_ns) - bisect.bisect_right(self._ended, t_ns)


def _held(result: RunResult, samples: list[MetricsSample]) -> Wait | None:
    """In most scrapes of the wait, the engine held requests loadrepro was not sending: more running and waiting
    than loadrepro had in flight, or (after loadrepro cancelled some) requests running while none of loadrepro's
    was being answered (an engine whose HTTP threads are taken does not even count loadrepro's waiting ones)."""
    start = samples[0].t_ns if samples else 0
    cancelled = [r for r in result.records if r.outcome is Outcome.CANCELLED and r.end_ns <= start]
    answering = _Answering(result.records)
    extra = [max(m.values[RUNNING] + m.values.get(WAITING, 0) - (m.in_flight or 0),
                 m.values[RUNNING] - answering.at(m.t_ns) if cancelled else 0) for m in samples]
    held = [e for e in extra if e >= 1]
    if len(held) < _LEAST_SCRAPES or len(held) < _HELD_SHARE * len(samples):
        return None
    most = max(held)
    words = (f"while they waited the engine held up to {most:g} "
             f"{'request that was' if most == 1 else 'requests that were'} not loadrepro's (beyond its requests in "
             "flight, or running beyond its answers under way) in "
             f"{len(held)} of {len(samples)} scrapes: requests loadrepro was not sending held the engine's capacity")
    if cancelled:
        last = max(r.end_ns for r in cancelled)
        words += (f", as if it kept running the {len(cancelled)} requests loadrepro had cancelled before (the last "
                  f"at {result.seconds(last):.1f} s)")
    return Wait("held", words, len(cancelled))


def _queued(samples: list[MetricsSample]) -> Wait | None:
    """The engine busy with loadrepro's own requests with others waiting, in every scrape of the wait."""
    if len(samples) < _LEAST_SCRAPES or not all(m.values.get(WAITING, 0) >= 1 for m in samples):
        return None
    running = max(m.values[RUNNING] for m in samples)
    waiting = max(m.values.get(WAITING, 0) for m in samples)
    return Wait("queued", f"queued: in every scrape while they waited the engine ran up to {running:g} of "
                          f"loadrepro's requests with up to {waiting:g} waiting, so they waited for a free slot "
                          "behind loadrepro's own requests")


def behind(result: RunResult, waited: list[RequestRecord]) -> Wait | None:
    """Why these requests (none with a first token) waited, in words, when the engine's metrics say; else None."""
    waited = [r for r in waited if r.first_token_ns is None]
    if not waited:
        return None
    samples = _during(result, waited)
    return _held(result, samples) or _queued(samples)


def _left_at(r: RequestRecord, t_ns: int) -> int:
    """The output tokens `r` still had to make at `t_ns`: what it made in all (its usage, else what it asked for)
    less the token chunks it had received by then (a chunk carries a token on the engines measured)."""
    made = _made(r) if r.outcome is Outcome.OK else r.max_tokens
    return max(0, made - sum(1 for c in r.chunk_ns if c <= t_ns))


def _made(r: RequestRecord) -> int:
    """The output tokens of an answer: its usage, else its token chunks (an engine that sends no usage)."""
    return r.completion_tokens if r.completion_tokens is not None else len(r.chunk_ns)


def _stream_rate(records: tuple[RequestRecord, ...]) -> float | None:
    """The median output tokens per second one completed stream was given, from its first token to its end."""
    rates = [_made(r) / ((r.end_ns - r.first_token_ns) / 1e9) for r in records
             if r.outcome is Outcome.OK and r.streamed and _made(r) and r.first_token_ns is not None
             and r.end_ns > r.first_token_ns]
    return statistics.median(rates) if rates else None


_KEPT_PACE = 0.8  # of a stream's usual rate per slot the engine must have kept up for a wait to be queueing


def queue_work(result: RunResult, timed_out: list[RequestRecord]) -> Wait | None:
    """Whether the last timed-out request waited behind work or behind a slowed engine: the output tokens
    loadrepro's requests ahead of it (in flight or waiting when it was sent, cancelled ones aside) still had to
    make, against the tokens the engine gave those requests while it waited. Queueing behind busy slots: work was
    left when its time ran out, and the engine kept at least _KEPT_PACE of a stream's usual rate for each slot it
    ran. Otherwise the queue alone does not explain the timeout. None when no stream completed to measure a rate."""
    waited = [r for r in timed_out if r.sent_ns is not None]
    rate = _stream_rate(result.records)
    if not waited or rate is None:
        return None
    last = max(waited, key=lambda r: r.sent_ns or 0)
    since, until = last.sent_ns or 0, last.end_ns
    ahead = [r for r in result.records if r is not last and r.outcome is not Outcome.CANCELLED
             and (r.sent_ns or r.queued_ns) < since < r.end_ns]
    tokens = sum(_left_at(r, since) for r in ahead)
    given = sum(1 for r in ahead for c in r.chunk_ns if since < c <= until)
    had = (until - since) / 1e9
    slots = max([m.values.get(RUNNING, 1) for m in result.metrics if since <= m.t_ns <= until] + [1])
    pace = given / had if had > 0 else 0.0
    waits = ", ".join(f"request {r.id} {_waited(r)}" for r in sorted(timed_out, key=lambda r: r.id)[:4])
    words = (f"{waits}; when request {last.id} was sent, loadrepro's {len(ahead)} requests ahead of it still had "
             f"about {tokens:,} output tokens to make, and in the {had:.0f} s it had the engine gave them {given:,} "
             f"({pace:,.0f} tokens/s; a stream was given {rate:,.0f} tokens/s, {slots:g} running at once)")
    if tokens > given and pace >= _KEPT_PACE * rate * slots:
        return Wait("queueing", words + ": queueing behind busy slots, not an engine fault")
    return Wait("unexplained", words + ": the queue alone does not explain the timeout")


def _waited(r: RequestRecord) -> str:
    if r.first_token_ns is None or r.sent_ns is None:
        return "got no first token"
    return f"waited {(r.first_token_ns - r.sent_ns) / 1e9:.1f} s for its first token"
