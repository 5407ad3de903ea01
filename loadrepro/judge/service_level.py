"""The service level ([slo]) measured: how many requests met it, in the steady state (from when the requests in
flight first reached their steady level) unless the ramp-up is asked for too, and goodput. Every request counts,
kept in memory or not (records/tally.py judges each as it is counted). Pure."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from loadrepro.records import RunResult
from loadrepro.records.counts import PerSecond, SloTotals

NAMES = {"ttft": "TTFT", "itl": "ITL", "e2e": "end to end"}


@dataclass(frozen=True, slots=True)
class SloMeasure:
    limits: dict[str, float]  # the limits set, in ms, by name (ttft, itl, e2e)
    from_s: int  # requests sent from this second of the load on are judged
    steady: bool  # from_s is where the steady state began (False: the whole run, ramp-up included)
    level: float  # the steady level of requests in flight (the median over the seconds requests were sent)
    judged: SloTotals  # the requests judged
    whole: SloTotals  # every request of the run, ramp-up included
    span_s: float  # from from_s to the load's last answer: what goodput is per

    @property
    def attainment(self) -> float | None:
        return self.judged.met / self.judged.requests if self.judged.requests else None

    @property
    def goodput_requests_per_s(self) -> float:
        return self.judged.met / self.span_s if self.span_s > 0 else 0.0

    @property
    def goodput_tokens_per_s(self) -> float:
        return self.judged.met_output_tokens / self.span_s if self.span_s > 0 else 0.0

    def describe(self) -> str:
        limits = ", ".join(f"{NAMES[name]} <= {limit:,g} ms" for name, limit in self.limits.items())
        missed = ", ".join(f"{n:,} {NAMES.get(name, name)}" for name, n in self.judged.missed.items() if n)
        where = (f"sent from {self.from_s} s (the steady state: requests in flight first at their level of "
                 f"{self.level:g})" if self.steady else "of the whole run, ramp-up included")
        share = f"{self.attainment:.1%}" if self.attainment is not None else "none"
        return (f"{share} of the {self.judged.requests:,} requests {where} met the SLO ({limits})"
                f"{f'; missed: {missed}' if missed else ''}; goodput {self.goodput_requests_per_s:,.2f} requests/s, "
                f"{self.goodput_tokens_per_s:,.1f} output tokens/s")


def _steady_from(per_second: PerSecond) -> tuple[int, float]:
    """The first second the requests in flight reached their steady level (the median over the seconds requests
    were sent in), and that level."""
    _, counts = per_second.in_flight()
    sending = [k for k, n in enumerate(per_second.sent) if n]
    if not sending:
        return 0, 0.0
    level = statistics.median(counts[k + 1] for k in range(sending[0], sending[-1] + 1))
    first = next((k for k in range(sending[0], sending[-1] + 1) if counts[k + 1] >= level), 0)
    return first, float(level)


def slo_measure(result: RunResult, window_s: float) -> SloMeasure | None:
    """The run against its [slo] (None: no limit set); `window_s`: [verdict]'s, whose tally is the run's own."""
    slo = result.slo
    if not slo.limits:
        return None
    totals = result.totals(window_s)
    first, level = _steady_from(totals.per_second)
    from_s = 0 if slo.include_ramp_up else first
    end_s = result.seconds(totals.last_end_ns or result.end_ns)
    counts = totals.slo_counts
    return SloMeasure(slo.limits, from_s, not slo.include_ramp_up, level, counts.between(from_s), counts.between(),
                      max(end_s - from_s, 0.0))
