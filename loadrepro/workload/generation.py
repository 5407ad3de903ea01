"""What every planned request asks of the engine's generation, whatever made it (seeded conversations or a
trace): its answer's length, whether end-of-sequence may end it early, and whether the answer streams."""

from __future__ import annotations

import hashlib
from typing import Any

from loadrepro.profile import WorkloadSpec


def streams(share: float, seed: int, key: tuple[int, ...]) -> bool:
    """Whether the request `key` names ((conversation, turn), or a trace row) streams its answer: every one at
    share 1, none at 0, else that share of them, drawn from the seed and the key alone, so the same request streams
    or not in every run, worker process and replay. (A keyed hash, not a generator: a trace's bodies are made one
    at a time, in no fixed order, and a million rows must not cost a generator each.)"""
    if share >= 1:
        return True
    if share <= 0:
        return False
    digest = hashlib.blake2b(repr((seed, *key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < share


def generation(spec: WorkloadSpec, max_tokens: int, chat: bool, stream: bool) -> dict[str, Any]:
    """The body keys that ask for the answer: its length (both names a chat API reads), ignore_eos, and a stream
    with its usage at the end, or the whole answer at once (`streams`)."""
    body: dict[str, Any] = {"max_tokens": max_tokens, "ignore_eos": spec.ignore_eos, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if chat:
        body["max_completion_tokens"] = max_tokens
    return body
