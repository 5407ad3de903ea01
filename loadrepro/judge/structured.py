"""Structured answers ([workload] structured_share): a request that asked for JSON (response_format) and whose
answer ended on its own must answer a JSON object. One that does not parse is a wrong answer the engine's grammar
should have made impossible: rule structured_output. Answers cut at max_tokens are not judged. Pure."""

from __future__ import annotations

from loadrepro.judge.findings import Finding, Severity
from loadrepro.profile import VerdictSpec
from loadrepro.records import RunResult


def structured_output(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """FAIL when any structured answer that ended on its own did not parse as a JSON object (threshold: one),
    naming the first; information with the counts otherwise."""
    t = result.totals(spec.window_s)
    if not t.structured:
        return None
    judged = t.structured - t.structured_cut
    cut = f" ({t.structured_cut:,} cut at max_tokens, not judged)" if t.structured_cut else ""
    if t.structured_unparsed and t.first_unparsed is not None:
        request, words = t.first_unparsed
        return Finding("structured_output", Severity.FAIL,
                       f"{t.structured_unparsed:,} of {judged:,} structured answers that ended on their own did not "
                       f"parse as a JSON object{cut}; the first, request {request}, answered {words!r}")
    if not judged:
        return Finding("structured_output", Severity.INFO,
                       f"none of the {t.structured:,} structured answers ended on their own: every one was cut at "
                       "max_tokens, so none was judged (a grammar that allows any whitespace lets a small model "
                       "pad an answer to its end; a larger max_tokens, or the engine told to allow none, lets "
                       "them end)")
    return Finding("structured_output", Severity.INFO,
                   f"every one of {judged:,} structured answers that ended on their own parsed as a JSON object{cut}")


STRUCTURED_RULES = (structured_output,)
