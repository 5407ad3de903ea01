"""The memory of an engine loadrepro started, as its process group held it at one moment (/proc: VmRSS, RssAnon,
VmSwap summed over every process of the group)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MemorySample:
    t_ns: int  # when it was read
    rss_bytes: int  # resident
    anon_bytes: int  # of which anonymous: the heap and the KV cache, not the mapped model file
    swap_bytes: int  # swapped out (growth hidden in swap)
    served: int  # requests the engine had answered by then (loadrepro's, of any outcome)
    processes: int  # processes of the group read
