"""Speculative decoding as the engine reported it: per request (llama.cpp's timings.draft_n, draft_n_accepted), or,
where no answer says, by its /metrics counters (vLLM's spec_decode_num_draft_tokens and _accepted_tokens). Its
figures, measured once over the whole run (records kept or not), and rule spec_acceptance_collapse: the later
acceptance far below the early one on the same engine (llama.cpp #27852: n-gram speculation whose state survives
across the requests of a slot, 86% falling to 11%), or below [verdict] min_draft_acceptance."""

from __future__ import annotations

from dataclasses import dataclass

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Finding, Severity
from loadrepro.records import SPEC_ACCEPTED, SPEC_DRAFTED, MetricsSample, RunResult

THIRD = 3  # early and late: the first and the last third of the requests that drafted (or of the counters' time)
COLLAPSE = 0.5  # late acceptance below this share of the early one's is a collapse
LEAST_EARLY = 0.2  # an early acceptance this low has nowhere to fall from
LEAST_REQUESTS = 6  # requests that drafted (or scrapes that saw drafts), to tell early from late at all


@dataclass(frozen=True, slots=True)
class SpecFigures:
    requests: int  # that drafted
    draft_tokens: int
    accepted: int
    early: float | None  # the first third's acceptance (None: too few requests)
    late: float | None
    per_request: tuple[float, ...]  # each drafting request's acceptance, in order (the first 1,000)
    from_counters: bool = False  # the engine's /metrics counters, not each answer's counts; `requests` is then 0

    @property
    def rate(self) -> float:
        return self.accepted / self.draft_tokens if self.draft_tokens else 0.0


def spec_figures(result: RunResult, window_s: float) -> SpecFigures | None:
    """None when no request drafted (no speculative decoding, or an engine that does not say)."""
    tally = result.totals(window_s)
    drafted, accepted = list(tally.drafted), list(tally.accepted)
    if not drafted:
        return _from_counters(result.metrics)
    early = late = None
    if len(drafted) >= LEAST_REQUESTS:
        n = len(drafted) // THIRD
        early = sum(accepted[:n]) / max(1, sum(drafted[:n]))
        late = sum(accepted[-n:]) / max(1, sum(drafted[-n:]))
    return SpecFigures(len(drafted), sum(drafted), sum(accepted), early, late,
                       tuple(round(a / d, 4) for d, a in zip(drafted[:1000], accepted[:1000])))


def _from_counters(metrics: tuple[MetricsSample, ...]) -> SpecFigures | None:
    """The counters' growth over the run, and over the first and last third of the time they grew in (from the
    scrape before their first growth to the scrape of their last: idle scrapes after the load are not a third of
    it). A counter's value at the run's start belongs to earlier traffic."""
    seen = [m for m in metrics if SPEC_DRAFTED in m.values and SPEC_ACCEPTED in m.values]
    moved = [i for i in range(1, len(seen)) if seen[i].values[SPEC_DRAFTED] > seen[i - 1].values[SPEC_DRAFTED]]
    if not moved:
        return None
    seen = seen[moved[0] - 1:moved[-1] + 1]

    def grown(a: MetricsSample, b: MetricsSample) -> tuple[float, float]:
        return b.values[SPEC_DRAFTED] - a.values[SPEC_DRAFTED], b.values[SPEC_ACCEPTED] - a.values[SPEC_ACCEPTED]

    drafted, accepted = grown(seen[0], seen[-1])
    early = late = None
    if len(moved) >= LEAST_REQUESTS:
        third = (seen[-1].t_ns - seen[0].t_ns) / THIRD
        first_end = max((m for m in seen if m.t_ns <= seen[0].t_ns + third), key=lambda m: m.t_ns)
        last_start = min((m for m in seen if m.t_ns >= seen[-1].t_ns - third), key=lambda m: m.t_ns)
        (d1, a1), (d2, a2) = grown(seen[0], first_end), grown(last_start, seen[-1])
        early, late = (a1 / d1 if d1 > 0 else None), (a2 / d2 if d2 > 0 else None)
    return SpecFigures(0, int(drafted), int(accepted), early, late, (), from_counters=True)


def acceptance_collapse(figures: SpecFigures | None, spec: VerdictSpec) -> Finding | None:
    """The engine's draft acceptance collapsed: the last third of the requests that drafted accepted less than half
    of what the first third did (which accepted 20% or more), or the whole run's acceptance fell below
    `min_draft_acceptance`. Needs 6 requests that drafted; from the engine's counters, thirds of the run's time and 6
    scrapes that saw drafts.

    Facts: `early`, `late` (acceptance, 0-1), `rate` (the whole run's), `requests`, `draft_tokens`, `source`
    (requests or metrics)."""
    if figures is None:
        return None
    facts = {"early": round(figures.early or 0.0, 4), "late": round(figures.late or 0.0, 4),
             "rate": round(figures.rate, 4), "requests": figures.requests, "draft_tokens": figures.draft_tokens,
             "source": "metrics" if figures.from_counters else "requests"}
    if figures.early is not None and figures.late is not None and figures.early >= LEAST_EARLY and \
            figures.late < COLLAPSE * figures.early:
        n = figures.requests // THIRD
        over = ("the first third of the run (the engine's counters)", "the last third") if figures.from_counters \
            else (f"the first {n} requests that drafted", f"the last {n}")
        return Finding("spec_acceptance_collapse", Severity.FAIL,
                       f"speculative decoding's acceptance collapsed: {figures.early:.0%} of the drafted tokens over "
                       f"{over[0]}, {figures.late:.0%} over {over[1]}", facts)
    enough = figures.requests >= LEAST_REQUESTS or figures.from_counters
    if spec.min_draft_acceptance and enough and figures.rate < spec.min_draft_acceptance:
        return Finding("spec_acceptance_collapse", Severity.FAIL,
                       f"speculative decoding accepted {figures.rate:.0%} of {figures.draft_tokens:,} drafted tokens, "
                       f"below min_draft_acceptance ({spec.min_draft_acceptance:.0%})", facts)
    return None
