"""KV-cache arithmetic: bytes per token, pool capacity, blocks needed, page-index span, per-request feasibility.

Pure. The numbers follow how the seed engines size things: bytes/token = layers x 2 (K and V) x KV heads x head
dim x dtype bytes; a pool shared with a draft/indexer cache is split in proportion to each side's bytes per
token (so both hold the same number of tokens); a page-index table sized from a clamped length has
ceil((len + 1) / tokens_per_block) entries rounded up to a multiple of 4.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

from loadrepro.errors import UsageError

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "k": 2**10, "kib": 2**10,
          "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30, "t": 2**40, "tib": 2**40, "ki": 2**10, "mi": 2**20,
          "gi": 2**30, "ti": 2**40}


def parse_size(text: str | int | float) -> int:
    """Bytes from `4194304`, `4MiB`, `60.51GiB` or `12GB` (a bare K/M/G/T is binary)."""
    if isinstance(text, (int, float)):
        return int(text)
    found = _SIZE.match(text)
    if not found:
        raise UsageError(f"not a size: {text!r} (examples: 4194304, 4MiB, 60.51GiB)")
    return int(float(found.group(1)) * _UNITS[(found.group(2) or "").lower()])


def bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"KV dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    return layers * 2 * kv_heads * head_dim * DTYPE_BYTES[dtype]


def split_pool(total_bytes: int, primary_bpt: int, draft_bpt: int) -> tuple[int, int]:
    """A pool shared by the primary and the draft cache: the bytes each side gets, for equal token counts."""
    tokens = total_bytes // (primary_bpt + draft_bpt)
    return tokens * primary_bpt, tokens * draft_bpt


def index_width(length: int, tokens_per_block: int) -> int:
    """Page-index entries a table sized from `length` tokens has."""
    return math.ceil(math.ceil((length + 1) / tokens_per_block) / 4) * 4


def blocks_needed(max_batch: int, max_seq_len: int, tokens_per_block: int, beam_width: int = 1) -> int:
    """Blocks for `max_batch` sequences of `max_seq_len` tokens, each beam holding its own."""
    return max_batch * math.ceil(max_seq_len / tokens_per_block) * beam_width


@dataclass(frozen=True, slots=True)
class KvConfig:
    """What the capacity model needs; pool sizes in bytes (derived from blocks or GPU memory by the caller)."""

    bytes_per_token: int
    tokens_per_block: int
    pool_bytes: int
    max_seq_len: int
    max_batch: int = 1
    beam_width: int = 1
    draft_bytes_per_token: int = 0
    draft_pool_bytes: int | None = None  # None with draft bytes/token: the draft shares pool_bytes

    def pools(self) -> tuple[int, int | None]:
        """(primary bytes, draft bytes or None)."""
        if not self.draft_bytes_per_token:
            return self.pool_bytes, None
        if self.draft_pool_bytes is None:
            return split_pool(self.pool_bytes, self.bytes_per_token, self.draft_bytes_per_token)
        return self.pool_bytes, self.draft_pool_bytes


@dataclass(frozen=True, slots=True)
class Capacity:
    bytes_per_token: int
    pool_tokens: int
    pool_blocks: int
    draft_pool_tokens: int | None
    clamped_seq_len: int  # the longest sequence the pool holds, capped at max_seq_len
    blocks_needed: int  # for max_batch x max_seq_len, x beam width
    full_sequences_fit: int  # max_seq_len sequences (x beam) the pool holds at once
    index_width: int  # page-index entries from the clamped length
    index_needed: int  # entries max_seq_len needs (what the one-line fix sizes the table to)
    verdict: Fit
    why: str


def capacity(kv: KvConfig) -> Capacity:
    primary_bytes, draft_bytes = kv.pools()
    pool_tokens = primary_bytes // kv.bytes_per_token
    pool_blocks = pool_tokens // kv.tokens_per_block
    draft_tokens = draft_bytes // kv.draft_bytes_per_token if draft_bytes is not None else None
    clamped = min(kv.max_seq_len, pool_tokens, draft_tokens if draft_tokens is not None else pool_tokens)
    per_sequence = math.ceil(kv.max_seq_len / kv.tokens_per_block) * kv.beam_width
    need = blocks_needed(kv.max_batch, kv.max_seq_len, kv.tokens_per_block, kv.beam_width)
    fit = pool_blocks // per_sequence if per_sequence else 0
    if draft_tokens is not None:
        fit = min(fit, draft_tokens // kv.max_seq_len)
    if fit == 0:
        verdict, why = Fit.NEVER_FITS, (f"one {kv.max_seq_len}-token sequence needs {per_sequence} blocks; the pool "
                                       f"holds {pool_blocks}" + (f" and the draft pool {draft_tokens} tokens"
                                                                 if draft_tokens is not None else ""))
    elif fit < kv.max_batch:
        verdict, why = Fit.MUST_WAIT, (f"{fit} of {kv.max_batch} full-length sequences fit at once; the rest "
                                           "must wait (or be preempted)")
    else:
        verdict, why = Fit.FITS, f"all {kv.max_batch} full-length sequences fit at once ({fit} would)"
    return Capacity(kv.bytes_per_token, pool_tokens, pool_blocks, draft_tokens, clamped, need, fit,
                    index_width(clamped, kv.tokens_per_block), index_width(kv.max_seq_len, kv.tokens_per_block),
                    verdict, why)


MAX_LENGTH = "max length"  # the limit of a request longer than the longest sequence the target takes


class Fit(StrEnum):
    """Whether something fits the KV pools: a request (predict), or an engine's whole configuration (capacity)."""

    FITS = "fits"
    MUST_WAIT = "must_wait"
    NEVER_FITS = "never_fits"

    @property
    def words(self) -> str:
        return {"fits": "fits", "must_wait": "fits only with waiting", "never_fits": "can never fit"}[self.value]


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """A target's capacity as a run sees it, in tokens and entries; from a profile or discovered."""

    source: str
    tokens_per_block: int
    pool_blocks: int
    max_seq_len: int
    beam_width: int = 1
    draft_pool_tokens: int | None = None
    index_entries: int | None = None

    @property
    def pool_tokens(self) -> int:
        return self.pool_blocks * self.tokens_per_block


@dataclass(frozen=True, slots=True)
class Prediction:
    conversation: int
    turn: int
    fit: Fit
    limit: str  # which limit decides: "max length", "pool", "draft pool", "page-index span", or ""
    tokens: int  # prompt + max_tokens


def predict(tokens: int, concurrency: int, limits: EngineLimits) -> tuple[Fit, str]:
    """Whether a request of `tokens` (prompt + output cap) fits alone, and alongside `concurrency` like it."""
    blocks = math.ceil(tokens / limits.tokens_per_block)
    if tokens > limits.max_seq_len:
        return Fit.NEVER_FITS, MAX_LENGTH
    if blocks * limits.beam_width > limits.pool_blocks:
        return Fit.NEVER_FITS, "pool"
    if limits.draft_pool_tokens is not None and blocks * limits.tokens_per_block > limits.draft_pool_tokens:
        return Fit.NEVER_FITS, "draft pool"
    if limits.index_entries is not None and blocks > limits.index_entries:
        return Fit.NEVER_FITS, "page-index span"
    if concurrency * blocks * limits.beam_width > limits.pool_blocks:
        return Fit.MUST_WAIT, "pool"
    if limits.draft_pool_tokens is not None and concurrency * blocks * limits.tokens_per_block > \
            limits.draft_pool_tokens:
        return Fit.MUST_WAIT, "draft pool"
    return Fit.FITS, ""


def never_whole(tokens: int, context: int | None, prediction: Prediction | None) -> bool:
    """Whether a request of `tokens` (prompt + output cap) is longer than the longest sequence the target takes, as
    its published limits say (`context`: max_model_len, a llama.cpp slot's n_ctx; or the KV arithmetic's max
    length). Such a request is refused by a length check before admission, or its answer cut at the context: it
    tests nothing of the KV pools. One that fits the context but never the pools is not counted: refusing it is the
    admission a run tests. Neither known: False (nothing says so)."""
    return (context is not None and tokens > context) or \
        (prediction is not None and prediction.fit is Fit.NEVER_FITS and prediction.limit == MAX_LENGTH)


def smallest_pool_tokens(limits: EngineLimits) -> int:
    """The tokens of the pool that binds first (beams counted)."""
    pools = [limits.pool_tokens // limits.beam_width]
    if limits.draft_pool_tokens is not None:
        pools.append(limits.draft_pool_tokens)
    return min(pools)


def prefix_for_overrun(factor: float, conversations: int, later_tokens: int, max_tokens: int,
                       limits: EngineLimits) -> int:
    """The prefix length that makes `conversations` full conversations need `factor` x the binding pool; each
    conversation's own blocks count once (its turns reuse them in the primary pool; the mirror holds them once
    per running request, and all run at once at the last turn)."""
    per_conversation = factor * smallest_pool_tokens(limits) / conversations
    return int(per_conversation - later_tokens - max_tokens)
