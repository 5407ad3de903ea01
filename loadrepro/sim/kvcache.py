"""Paged KV-cache pools and the capacity arithmetic of the simulated engine. Pure: no I/O, no clock.

A pool is a fixed number of blocks of `block_size` tokens. A reuse-enabled pool keys full blocks by a hash chain
over their tokens, so a request whose prompt starts with an earlier prompt's blocks shares them (reference
counted). Blocks whose count drops to zero stay cached until evicted, least recently freed first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def block_hashes(tokens: Sequence[str], block_size: int) -> list[bytes]:
    """Hash chain over the full blocks of `tokens`: each hash covers its block and every block before it."""
    hashes: list[bytes] = []
    previous = b""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        text = "\x1f".join(tokens[start:start + block_size]).encode()
        previous = hashlib.blake2b(previous + text, digest_size=16).digest()
        hashes.append(previous)
    return hashes


def clamped_seq_len(pool_bytes: int, bytes_per_token: int, max_model_len: int) -> int:
    """The sequence length a memory budget allows, never above the configured maximum."""
    return min(max_model_len, pool_bytes // bytes_per_token)


def page_index_width(clamped_len: int, block_size: int) -> int:
    """Entries of a page-index table sized from `clamped_len`: ceil((len + 1) / block), up to a multiple of 4."""
    entries = blocks_for(clamped_len + 1, block_size)
    return -(-entries // 4) * 4


class BlockPool:
    """A fixed set of KV blocks with reference counts and, when `reuse` is on, a prefix cache."""

    def __init__(self, num_blocks: int, reuse: bool = True, stale_index: bool = False) -> None:
        """stale_index: the prefix-corruption defect. A cached block taken for new work stays findable under its
        old hash, so a later prompt with that prefix reads whatever the block holds now."""
        self.num_blocks = num_blocks
        self.reuse = reuse
        self.stale_index = stale_index
        # What each filled block holds: its hash, and the conversation tag among the tokens up to its end (a block
        # taken for new work holds neither until it is filled again).
        self._content: dict[int, tuple[bytes, str | None]] = {}
        self._ref = [0] * num_blocks
        # Blocks with no owner, oldest first: allocation evicts from the front.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._hash_of: dict[int, bytes] = {}
        self._by_hash: dict[bytes, int] = {}

    @property
    def num_free(self) -> int:
        """Blocks an allocation can take, cached-but-unowned ones included."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def num_cached_free(self) -> int:
        return sum(1 for b in self._free if b in self._hash_of)

    def cached_prefix(self, hashes: Sequence[bytes]) -> list[int]:
        """Blocks holding the longest cached prefix of `hashes`."""
        if not self.reuse:
            return []
        found = []
        for h in hashes:
            block = self._by_hash.get(h)
            if block is None:
                break
            found.append(block)
        return found

    def free_besides(self, blocks: Sequence[int]) -> int:
        """Free blocks left once `blocks` (cache hits about to be taken) are owned."""
        return self.num_free - sum(1 for b in blocks if self._ref[b] == 0)

    def take_cached(self, blocks: Sequence[int]) -> None:
        for b in blocks:
            if self._ref[b] == 0:
                del self._free[b]
            self._ref[b] += 1

    def allocate(self, n: int) -> list[int] | None:
        """`n` fresh blocks, evicting cached ones oldest first; None (and nothing taken) when too few are free."""
        if n > len(self._free):
            return None
        taken = []
        for _ in range(n):
            block, _ = self._free.popitem(last=False)
            stale = self._hash_of.pop(block, None)
            if stale is not None and not self.stale_index:
                del self._by_hash[stale]
            self._content.pop(block, None)
            self._ref[block] = 1
            taken.append(block)
        return taken

    def allocate_upto(self, n: int) -> list[int]:
        """As many of `n` fresh blocks as there are: how a block-by-block allocator leaves a pool it overran."""
        return self.allocate(min(n, len(self._free))) or []

    def release(self, blocks: Sequence[int]) -> None:
        # Reversed, so a sequence's tail is evicted before the prefix other requests are likelier to share.
        for b in reversed(blocks):
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._free[b] = None

    def register(self, block: int, block_hash: bytes, tag: str | None = None) -> None:
        """Make a filled block findable by later prompts that share its prefix."""
        self._content[block] = (block_hash, tag)
        if not self.reuse or block in self._hash_of or block_hash in self._by_hash:
            return
        self._hash_of[block] = block_hash
        self._by_hash[block_hash] = block

    def read(self, block: int) -> tuple[bytes, str | None] | None:
        """What a block holds (its hash and tag); None when it was taken for new work and not filled since."""
        return self._content.get(block)

    def reset(self) -> None:
        """Forget every cached block nothing holds (vLLM's /reset_prefix_cache): later prompts compute them anew."""
        for block_hash, block in list(self._by_hash.items()):
            if self._ref[block] == 0 or self._hash_of.get(block) != block_hash:
                del self._by_hash[block_hash]
                if self._hash_of.get(block) == block_hash:
                    del self._hash_of[block]
