"""What every planned request asks of the engine's generation, whatever made it (seeded conversations or a
trace): its answer's length, whether end-of-sequence may end it early, whether the answer streams, and whether it
must be structured (JSON), each drawn per request from the seed."""

from __future__ import annotations

import hashlib
from typing import Any

from loadrepro.config.workload_spec import StructuredFormat, WorkloadSpec
from loadrepro.workload.structured_requests import asking

MIN_STRUCTURED_TOKENS = 16  # requests asking for fewer tokens (warm-ups) are not asked for a structured answer


def streams(share: float, seed: int, key: tuple[int | str, ...]) -> bool:
    """Whether the request `key` names ((conversation, turn), or a trace row) streams its answer: every one at
    share 1, none at 0, else that share of them, drawn from the seed and the key alone, so the same request streams
    or not in every run, worker process and replay. (A keyed hash, not a generator: a trace's bodies are made one
    at a time, in no fixed order, and a million rows must not cost a generator each.)"""
    return drawn(share, seed, key)


def drawn(share: float, seed: int, key: tuple[int | str, ...]) -> bool:
    """True for `share` of the keys, the same for a key in every run."""
    if share >= 1:
        return True
    if share <= 0:
        return False
    digest = hashlib.blake2b(repr((seed, *key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < share


def generation(spec: WorkloadSpec, max_tokens: int, chat: bool, key: tuple[int, ...]) -> dict[str, Any]:
    """The body keys that ask for the answer of the request `key` names: its length (both names a chat API reads),
    ignore_eos, a stream with its usage at the end or the whole answer at once (`streams`), and for
    [workload] structured_share of chat requests a structured answer, of one of the structured formats (drawn)."""
    stream = streams(spec.stream, spec.seed, key)
    body: dict[str, Any] = {"max_tokens": max_tokens, "ignore_eos": spec.ignore_eos, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if chat:
        body["max_completion_tokens"] = max_tokens
        if max_tokens >= MIN_STRUCTURED_TOKENS and drawn(spec.structured_share, spec.seed, ("structured", *key)):
            # the answer ends where its grammar does: an end-of-sequence ignored would fight the grammar
            body |= {**asking(spec, _format(spec, key)), "ignore_eos": False}
    return body


def _format(spec: WorkloadSpec, key: tuple[int, ...]) -> StructuredFormat:
    """The structured format the request `key` names asks for: one of the profile's, drawn from the seed and the key
    (the same in every run)."""
    formats = spec.structured_formats
    if len(formats) == 1:
        return formats[0]
    digest = hashlib.blake2b(repr((spec.seed, "format", *key)).encode(), digest_size=8).digest()
    return formats[int.from_bytes(digest, "big") % len(formats)]
