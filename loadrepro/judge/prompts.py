"""Rules over the prompts as the engine counted them against their plan: prompts the engine cut and answered as
if whole (prompt_truncated), and prompts off their planned length (prompt_lengths). Pure."""

from __future__ import annotations

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Finding, Severity, quote
from loadrepro.judge.signatures import INPUT_TRUNCATED
from loadrepro.records import RunResult


def _cut(result: RunResult, spec: VerdictSpec) -> tuple[int, float, bool]:
    """How many answered prompts the engine cut, by how much their median was, and whether most of the others
    agree with the plan. Cut: counted shorter than planned by more than `max_prompt_error` when the engine's log
    says it cut prompts, else deeper than a calibration error goes (counts.CUT_SHARE and CUT_TOKENS); and told
    apart from a calibration error (which makes every prompt's length wrong) by that log line or by the others
    agreeing with the plan. 0: none, or no telling."""
    errors = result.totals(spec.window_s).prompt_errors
    logged = any(m.signature == INPUT_TRUNCATED for m in result.log_matches)
    cut, median = errors.shorter_beyond(spec.max_prompt_error) if logged else errors.cut_deep()
    if not cut:
        return 0, 0.0, False
    uncut = errors.count - cut
    agree = uncut > 0 and 2 * max(0, errors.beyond(spec.max_prompt_error) - cut) < uncut
    return (cut, median, agree) if agree or logged else (0, 0.0, False)


def prompt_truncated(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Prompts the engine cut and answered as if whole (llama.cpp cuts a prompt longer than a slot's context, and
    says so only in its log): an answer to a cut prompt is an answer to another request. Fails the run unless
    `allow_truncated_prompts`. Counts every request, kept in memory or not.

    Facts: `cut` of `prompts`, `median_shortfall` (a fraction), `context_tokens` (0: unknown), `logged` (1: the
    engine's log says it cut), `calibration_ruled_out` (1: the other prompts agree with the plan)."""
    cut, median, agree = _cut(result, spec)
    errors = result.totals(spec.window_s).prompt_errors
    if not cut or errors.shortest is None:
        return None
    w = errors.shortest
    said = [f"{cut}/{errors.count} prompts were cut by the engine and answered as if whole: counted a median "
            f"{median:.0%} shorter than planned (request {w.request}: planned {w.planned:,} tokens, the engine "
            f"counted {w.measured:,})"]
    if result.context is not None:
        said.append(f"the engine takes {result.context[0]:,} tokens a request ({result.context[1]})")
    log = next((m for m in result.log_matches if m.signature == INPUT_TRUNCATED), None)
    if log is not None:
        said.append(f"its log: {quote(log.line)}")
    if agree:
        said.append(f"the other {errors.count - cut} prompts' lengths agree with the plan: not a calibration error")
    severity = Severity.INFO if spec.allow_truncated_prompts else Severity.FAIL
    return Finding("prompt_truncated", severity, "; ".join(said), {
        "cut": cut, "prompts": errors.count, "median_shortfall": round(median, 4),
        "context_tokens": result.context[0] if result.context is not None else 0, "logged": int(log is not None),
        "calibration_ruled_out": int(agree)})


def prompt_lengths(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """Prompts whose usage.prompt_tokens differ from their planned length by more than `max_prompt_error` (those
    the engine cut apart: rule prompt_truncated): the workload that ran is not the one asked for. A warning (info):
    the engine did nothing wrong. Counts every request, kept in memory or not.

    Facts: `off` of `prompts`, `max_prompt_error`, `worst_error` (the worst's relative error; 0 with prompts cut)."""
    errors = result.totals(spec.window_s).prompt_errors
    cut = _cut(result, spec)[0]
    off = errors.beyond(spec.max_prompt_error) - cut
    if off <= 0 or errors.worst is None:
        return None
    w = errors.worst
    worst = "" if cut else (f" (worst: request {w.request}, planned {w.planned:,}, the target counted "
                            f"{w.measured:,}, {w.error:+.1%})")  # with prompts cut, the worst is one of those
    return Finding("prompt_lengths", Severity.INFO,
                   f"warning: {off}/{errors.count} prompts were off their planned length by more than "
                   f"{spec.max_prompt_error:.0%}{worst}: the workload that ran is not the one asked for",
                   {"off": off, "prompts": errors.count, "max_prompt_error": spec.max_prompt_error,
                    "worst_error": 0.0 if cut else round(w.error, 4)})
