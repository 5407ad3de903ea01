"""The memory of an engine at one moment: for one loadrepro started, its process group's (/proc: VmRSS, RssAnon,
VmSwap summed over every process of the group); for a target at a URL, its serving process's resident memory as
its /metrics publish it (process_resident_memory_bytes), with anonymous and swapped memory unknown."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MemorySample:
    t_ns: int  # when it was read
    rss_bytes: int  # resident
    anon_bytes: int | None  # of which anonymous: the heap and the KV cache, not the mapped model file
    swap_bytes: int | None  # swapped out (growth hidden in swap)
    served: int  # requests the engine had answered by then (loadrepro's, of any outcome)
    processes: int  # processes of the group read (0: read from the target's /metrics)
