"""What the simulated model answers: a deterministic function of the context it computed from, with logprobs.
Pure.

A request's context is its prompt as the engine read it: the KV blocks it found in the prefix cache (whatever
they hold) and then its own tokens. Each output token follows from that context's fingerprint, the position and
the token before it. Most positions are confident (the chosen word leads its runner-up by 2 to 6 nats); one in
NEAR_TIE_EVERY is a near-tie (0.05 to 0.3 nats), and a near-tie may flip to its runner-up when other requests
share the batch, as floating-point sums do on real engines. A confident position never flips. So a healthy
engine answers the same request the same way alone and under load up to near-ties, and a context read from the
wrong blocks answers confidently otherwise. The first token names the conversation's tag when the context holds
one, as the workload's system prompt asks ("citing record ids"): an answer computed from another conversation's
blocks names that conversation's tag.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from loadrepro.sim.tokenizer import OUTPUT_WORDS

NEAR_TIE_EVERY = 8
TAG = re.compile(r"LR[A-Z2-7]{8}")  # a conversation's tag, as the workload writes it (one token here)


@dataclass(frozen=True, slots=True)
class Choice:
    """One generated token: its text (with its leading space) and logprob, and the runner-up's."""

    text: str
    logprob: float
    runner_text: str
    runner_logprob: float


def continue_chain(previous: bytes, tokens: Sequence[str], block_size: int) -> bytes:
    """The context's fingerprint: the block hash chain (kvcache.block_hashes) continued from `previous` over
    `tokens`, then over their partial last block. The same tokens give the same fingerprint however many of the
    leading blocks came from the cache, as long as those blocks held what their hashes say."""
    chain = previous
    full = len(tokens) - len(tokens) % block_size
    for start in range(0, full, block_size):
        chain = hashlib.blake2b(chain + "\x1f".join(tokens[start:start + block_size]).encode(),
                                digest_size=16).digest()
    return hashlib.blake2b(chain + b"\x1e" + "\x1f".join(tokens[full:]).encode(), digest_size=16).digest()


def _bytes(*parts: object) -> bytes:
    return hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=16).digest()


def choose(fingerprint: bytes, position: int, previous: str, batch: int, tag: str | None) -> Choice:
    """The token at `position` (0-based), after `previous`, with `batch` requests decoding in the same step."""
    h = hashlib.blake2b(fingerprint + _bytes(position, previous), digest_size=16).digest()
    n = len(OUTPUT_WORDS)
    word, runner = h[0] % n, (h[0] % n + 1 + h[1] % (n - 1)) % n
    text, runner_text = " " + OUTPUT_WORDS[word], " " + OUTPUT_WORDS[runner]
    if position == 0 and tag is not None:
        text, margin = " " + tag, 8.0  # naming the case is never in doubt
    elif h[2] % NEAR_TIE_EVERY == 0:
        margin = 0.05 + 0.25 * h[3] / 255
        if batch > 1 and _bytes(h.hex(), batch)[0] % 2:  # batching's floating-point noise flips it
            text, runner_text = runner_text, text
    else:
        margin = 2.0 + 4.0 * h[3] / 255
    # The chosen and the runner-up together hold at most all of the probability: p1 = 1 / (1 + e^-margin) at most.
    logprob = -math.log1p(math.exp(-margin)) - 0.05 * h[4] / 255
    return Choice(text, round(logprob, 6), runner_text, round(logprob - margin, 6))


def tag_in(tokens: Sequence[str]) -> tuple[str, int] | None:
    """The first conversation tag among `tokens`, and its position."""
    for i, token in enumerate(tokens):
        if TAG.fullmatch(token):
            return token, i
    return None
