"""Structured answers ([workload] structured_share): a request that asked for JSON (response_format), a choice or
a regex and whose answer ended on its own must answer a JSON object, one of the choices, or a match. One that does
not is a wrong answer the engine's grammar should have made impossible: rule structured_output. Answers cut at
max_tokens are not judged, nor answers to a grammar (counted only). Pure."""

from __future__ import annotations

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Finding, Severity
from loadrepro.records import RunResult
from loadrepro.records.tally import Tally


def structured_output(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """FAIL when any structured answer that ended on its own did not parse as a JSON object (threshold: one),
    naming the first; information with the counts otherwise."""
    t = result.totals(spec.window_s)
    if not t.structured and not t.structured_refused:
        return None
    refused = _refused(t)
    judged = t.structured - t.structured_cut - t.structured_unchecked
    cut = "".join(f", {n:,} {why}" for n, why in ((t.structured_cut, "cut at max_tokens"),
                                                  (t.structured_unchecked, "to a grammar")) if n)
    cut = f" ({cut[2:]}: not judged)" if cut else ""
    if t.structured_unparsed and t.first_unparsed is not None:
        request, words = t.first_unparsed
        return Finding("structured_output", Severity.FAIL,
                       f"{t.structured_unparsed:,} of {judged:,} structured answers that ended on their own were not "
                       f"what they asked for (a JSON object, one of the choices, a match of the regex){cut}; the "
                       f"first, request {request}, answered {words!r}{refused}")
    if not t.structured:
        return Finding("structured_output", Severity.INFO, f"no structured answer to judge{refused}")
    if not judged and t.structured_unchecked and not t.structured_cut:
        return Finding("structured_output", Severity.INFO,
                       f"{t.structured_unchecked:,} answers to a grammar ended on their own (counted, not checked: "
                       f"that needs the engine's grammar parser){refused}")
    if not judged:
        return Finding("structured_output", Severity.INFO,
                       f"none of the {t.structured:,} structured answers ended on their own: every one was cut at "
                       "max_tokens, so none was judged (a grammar that allows any whitespace lets a small model "
                       "pad an answer to its end; a larger max_tokens, or the engine told to allow none, lets "
                       f"them end){refused}")
    return Finding("structured_output", Severity.INFO,
                   f"every one of {judged:,} structured answers that ended on their own was what it asked for (a "
                   f"JSON object, one of the choices, a match of the regex){cut}{refused}")


def _refused(t: Tally) -> str:
    """The structured requests the engine refused: not judged, and not a capacity fault either (an engine
    started without the feature refuses them all; vLLM's tool calls need --enable-auto-tool-choice and
    --tool-call-parser). Said so the run is not read as having tested them."""
    if not t.structured_refused or t.first_refused is None:
        return ""
    request, words = t.first_refused
    return (f"; {t.structured_refused:,} structured requests were refused, so not judged (the first, request "
            f"{request}: {words!r}): an engine not started to serve what they asked for refuses them")


STRUCTURED_RULES = (structured_output,)
