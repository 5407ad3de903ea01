"""[load] warmup_requests: requests sent before the load to warm the engine's code paths (kernels compiled, buffers
allocated, the first batches' shapes seen), not its prefix cache, and not judged (load/warmup.py sends them).

Each is one of the run's first requests in shape (its API, its messages and their lengths, max_tokens, its other
parameters), with every text's words shuffled under a salt of its own and a marker with that salt first. It shares
no prefix with the run, nor with another warm-up: a prefix cache keyed by blocks from the first token (vLLM, SGLang)
finds nothing of the run in it, and no run of words of the run's own survives for llama.cpp's chunk reuse
(--cache-reuse) to find either. A warm-up that primed the run's own prefixes would hide a prefix-cache bug: the
run's first requests would meet a cache loadrepro filled, outside the run."""

from __future__ import annotations

import dataclasses
import hashlib
import random
from dataclasses import dataclass
from itertools import cycle, islice
from typing import Any

from loadrepro.workload.model import Body, PlannedRequest, Workload

WARMUP_CONVERSATION = -2  # warm-ups' records are not the workload's requests (canaries are -1)


@dataclass(frozen=True, slots=True)
class _Scrambled:
    """A body step: each text's words shuffled, the first text led by a marker. Picklable, for workers."""

    salt: str

    def __call__(self, body: Body) -> Body:
        rng = random.Random(self.salt)
        marker = f"[warm-up {hashlib.blake2b(self.salt.encode(), digest_size=6).hexdigest()}]\n\n"
        if isinstance(body.get("prompt"), str):
            return {**body, "prompt": marker + _shuffled(body["prompt"], rng)}
        messages = [_message(m, rng) for m in body.get("messages") or []]
        if messages and isinstance(content := messages[0].get("content"), str):
            messages[0] = {**messages[0], "content": marker + content}
        elif messages and isinstance(content, list):  # parts (an image): the marker as the first text part
            messages[0] = {**messages[0], "content": [{"type": "text", "text": marker}, *content]}
        return {**body, "messages": messages} if "messages" in body else body


def _message(message: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": _shuffled(content, rng)}
    if isinstance(content, list):
        return {**message, "content": [{**part, "text": _shuffled(part["text"], rng)}
                                       if isinstance(part, dict) and isinstance(part.get("text"), str) else part
                                       for part in content]}
    return message


def _shuffled(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    rng.shuffle(words)
    return " ".join(words)


def engine_warmups(workload: Workload, count: int, salt: str) -> tuple[PlannedRequest, ...]:
    """`count` warm-ups shaped as the run's first requests (in turn, again from the first when there are fewer),
    each scrambled under `salt` and its own number (`salt`: the run's own, so that no two runs send the same)."""
    if not count:
        return ()
    # the first `count` only: a trace of a million rows is not listed for a few warm-ups
    sources = list(islice((t for c in workload.conversations for t in c.turns if t.live_tail is None), count))
    if not sources:
        return ()
    return tuple(dataclasses.replace(source, conversation=WARMUP_CONVERSATION, turn=0, arrival_s=None, delay_s=0.0,
                                     joins=(), shared_prefix_tokens=0, own_prefix_tokens=None)
                 .then(_Scrambled(f"{salt}:{i}"))
                 for i, source in zip(range(count), cycle(sources), strict=False))
