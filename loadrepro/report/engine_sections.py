"""What the engine itself showed of a run, as report.json's sections: its memory (judge/memory.py) and its
speculative decoding (judge/speculative.py), read from what the judge measured."""

from __future__ import annotations

from loadrepro.judge.memory import MemoryFigures
from loadrepro.judge.speculative import SpecFigures
from loadrepro.schema.report_sections import EngineMemoryInfo, SpeculativeInfo


def speculative_section(s: SpecFigures | None) -> SpeculativeInfo | None:
    if s is None:
        return None
    return SpeculativeInfo(requests=s.requests, draft_tokens=s.draft_tokens, accepted_tokens=s.accepted,
                           acceptance_rate=round(s.rate, 4), early_rate=None if s.early is None else round(s.early, 4),
                           late_rate=None if s.late is None else round(s.late, 4), per_request=list(s.per_request),
                           source="metrics" if s.from_counters else "requests")


def memory_section(m: MemoryFigures | None) -> EngineMemoryInfo | None:
    if m is None:
        return None
    return EngineMemoryInfo(start_mb=m.start_mb, peak_mb=m.peak_mb, warm_mb=m.warm_mb, end_mb=m.end_mb,
                            anon_end_mb=m.anon_end_mb, swap_peak_mb=m.swap_peak_mb, growth_mb=m.growth_mb,
                            growth_per_1000_requests_mb=m.per_1000_mb, r=m.r, readings=m.readings,
                            not_judged=m.not_judged, plateaued=m.plateaued, cache_cap_mb=m.cache_cap_mb,
                            source="metrics" if m.from_metrics else "proc")
