"""Speculative decoding as the engine reported it per request (llama.cpp's timings.draft_n, draft_n_accepted): its
figures, measured once over every request of the run (records kept or not), and rule spec_acceptance_collapse: the
later requests' acceptance far below the early ones' on the same engine (llama.cpp #27852: n-gram speculation whose
state survives across the requests of a slot, 86% falling to 11%), or below [verdict] min_draft_acceptance."""

from __future__ import annotations

from dataclasses import dataclass

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Finding, Severity
from loadrepro.records import RunResult

THIRD = 3  # early and late: the first and the last third of the requests that drafted, in the order they ended
COLLAPSE = 0.5  # late acceptance below this share of the early one's is a collapse
LEAST_EARLY = 0.2  # an early acceptance this low has nowhere to fall from
LEAST_REQUESTS = 6  # requests that drafted, to tell early from late at all


@dataclass(frozen=True, slots=True)
class SpecFigures:
    requests: int  # that drafted
    draft_tokens: int
    accepted: int
    early: float | None  # the first third's acceptance (None: too few requests)
    late: float | None
    per_request: tuple[float, ...]  # each drafting request's acceptance, in order (the first 1,000)

    @property
    def rate(self) -> float:
        return self.accepted / self.draft_tokens if self.draft_tokens else 0.0


def spec_figures(result: RunResult, window_s: float) -> SpecFigures | None:
    """None when no request drafted (no speculative decoding, or an engine that does not say)."""
    tally = result.totals(window_s)
    drafted, accepted = list(tally.drafted), list(tally.accepted)
    if not drafted:
        return None
    early = late = None
    if len(drafted) >= LEAST_REQUESTS:
        n = len(drafted) // THIRD
        early = sum(accepted[:n]) / max(1, sum(drafted[:n]))
        late = sum(accepted[-n:]) / max(1, sum(drafted[-n:]))
    return SpecFigures(len(drafted), sum(drafted), sum(accepted), early, late,
                       tuple(round(a / d, 4) for d, a in zip(drafted[:1000], accepted[:1000])))


def acceptance_collapse(figures: SpecFigures | None, spec: VerdictSpec) -> Finding | None:
    """The engine's draft acceptance collapsed: the last third of the requests that drafted accepted less than half
    of what the first third did (which accepted 20% or more), or the whole run's acceptance fell below
    `min_draft_acceptance`. Needs 6 requests that drafted.

    Facts: `early`, `late` (acceptance, 0-1), `rate` (the whole run's), `requests`, `draft_tokens`."""
    if figures is None:
        return None
    facts = {"early": round(figures.early or 0.0, 4), "late": round(figures.late or 0.0, 4),
             "rate": round(figures.rate, 4), "requests": figures.requests, "draft_tokens": figures.draft_tokens}
    if figures.early is not None and figures.late is not None and figures.early >= LEAST_EARLY and \
            figures.late < COLLAPSE * figures.early:
        n = figures.requests // THIRD
        return Finding("spec_acceptance_collapse", Severity.FAIL,
                       f"speculative decoding's acceptance collapsed: {figures.early:.0%} of the drafted tokens over "
                       f"the first {n} requests that drafted, {figures.late:.0%} over the last {n}", facts)
    if spec.min_draft_acceptance and figures.requests >= LEAST_REQUESTS and figures.rate < spec.min_draft_acceptance:
        return Finding("spec_acceptance_collapse", Severity.FAIL,
                       f"speculative decoding accepted {figures.rate:.0%} of {figures.draft_tokens:,} drafted tokens, "
                       f"below min_draft_acceptance ({spec.min_draft_acceptance:.0%})", facts)
    return None
