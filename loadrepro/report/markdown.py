"""report.md: written to be pasted into a GitHub issue as it is."""

from __future__ import annotations

from loadrepro.judge.findings import counted
from loadrepro.report.cells import cell, count, ms
from loadrepro.report.diagnosis import verdict_words
from loadrepro.report.long_run_markdown import chaos_section, slo_section, trials_section, windows_section
from loadrepro.schema.report_sections import Percentiles, health_said
from loadrepro.schema.run_report import RunReport

EXCERPT_LINES = 20


# The latency rows of every report format: a name, and what the row's values are drawn from.
# The queue is loadrepro's own, before a request is sent: waiting for one of its [load] concurrency slots, not for
# an engine's slot (llama.cpp's -np).
LATENCY_ROWS = (("time to first token", "ttft_ms", ("request with a token", "requests with a token")),
                ("time to first content token", "ttfc_ms", ("request with content", "requests with content")),
                ("inter-token", "itl_ms", ("gap between token chunks", "gaps between token chunks")),
                ("end to end", "e2e_ms", ("request sent, failed or not", "requests sent, failed ones too")),
                ("queued in loadrepro ([load] concurrency)", "queue_ms", ("request sent", "requests sent")))


def latency_rows(r: RunReport) -> list[tuple[str, Percentiles, str]]:
    """Each latency row: its name, its percentiles, and what they cover ("1,200 requests with a token")."""
    rows = []
    for name, field, what in LATENCY_ROWS:
        p: Percentiles = getattr(r.latency, field)
        rows.append((name, p, counted(p.count, *what) if p.count is not None else what[1]))
    return rows


def _row(name: str, p: Percentiles, over: str) -> str:
    return f"| {name} | {ms(p.p50)} | {ms(p.p95)} | {ms(p.p99)} | {ms(p.max)} | {over} |"


def _fence(lines: list[str]) -> list[str]:
    return ["```text", *lines, "```"]


def _header(r: RunReport) -> list[str]:
    lines = [f"# loadrepro: {r.verdict.upper()} - {r.profile['name']} ({r.label})", ""]
    lines += [f"- {reason}" for reason in r.reasons] or ["- no rule fired"]
    lines += ["", "Reproduce with:", "", "```bash", r.command, "```", ""]
    return lines


def _target(r: RunReport) -> list[str]:
    t, e = r.target, r.environment
    lines = ["## Target", "", "| | |", "|---|---|", f"| base URL | {t.base_url} |", f"| model | {cell(t.model)} |"]
    if t.engine_cmd:
        lines.append(f"| engine command | `{cell(t.engine_cmd)}` |")
    lines += [f"| loadrepro | {e.loadrepro_version} (Python {e.python}, {cell(e.platform)}) |",
              f"| started | {r.started_at}, {r.duration_s:.1f} s, stopped: {r.stop_reason} |"]
    timing = r.timing
    if timing is not None and timing.to_first_request_s is not None and \
            timing.last_answer_to_verdict_s is not None:
        lines.append(f"| beside the load | {timing.to_first_request_s:.1f} s from the command to the first request, "
                     f"{timing.last_answer_to_verdict_s:.1f} s from the last answer to the verdict |")
    lines.append("")
    return lines


def _workload(r: RunReport) -> list[str]:
    w, p = r.workload, r.profile
    load = p["load"]
    planned = f"{w.requests} requests in {w.conversations} conversations"
    if load.get("duration_s"):  # a soak cycles through the plan until its duration
        ran = f"{r.requests.total:,} requests in {r.requests.conversations:,} conversations"
        planned = f"a plan of {planned}, repeated for {load['duration_s']:g} s: {ran} ran"
    return ["## Workload", "", f"Profile `{p['name']}`: {p['description']}", "",
            f"- {w.kind}: {planned} ({p['api']} API), "
            f"prompts p50 {w.prompt_tokens.p50:,} / p95 {w.prompt_tokens.p95:,} / max {w.prompt_tokens.max:,} tokens",
            *([f"- {w.origin}"] if w.origin else []),
            f"- seed {w.seed}, faker {w.faker_version}, lengths counted with {w.calibration_source}",
            f"- concurrency {load['concurrency']}, arrival {load['arrival']}, request timeout "
            f"{load['request_timeout_s']} s, stall timeout {load['stall_timeout_s']} s", *_lengths(r), ""]


def _lengths(r: RunReport) -> list[str]:
    lines = []
    c, n = r.calibration, r.lengths
    if c is not None and c.probe_requests:
        lines.append(f"- lengths counted with {c.probe_requests} probe requests, {c.probe_tokens:,} tokens "
                     "(salted, one at a time; no run prompt was sent before the run)")
    if n is not None and n.requests and n.worst is not None:
        w = n.worst
        lines.append(f"- planned vs measured prompt tokens ({n.requests} requests with usage): error p50 "
                     f"{n.error_p50:.2%}, p95 {n.error_p95:.2%}, max {n.error_max:.2%}, bias {n.bias:+.2%}; worst: "
                     f"request {w.request} (conversation {w.conversation}, turn {w.turn}) planned {w.planned:,}, "
                     f"measured {w.measured:,}")
    return lines


def _outcomes(r: RunReport) -> list[str]:
    lines = ["## Outcomes", "", "| outcome | requests |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in r.requests.by_outcome.items()]
    lines += [f"| **total** | **{r.requests.total}** |", ""]
    if r.requests.reconnects:
        lines += [f"{r.requests.reconnects} requests were resent at once on a new connection because the target had "
                  "closed the pooled one (not outcomes).", ""]
    return lines


def health_lines(r: RunReport) -> list[str]:
    """How /health answered and what a liveness probe would have made of it (report.md and report.html)."""
    h = r.health
    lines = [f"The health path {h.owner}: it says whether the gateway lives, not the engine."] if h.owner else []
    if h.latency_ms.max is not None:
        lines.append(f"{h.path} answered in p50 {ms(h.latency_ms.p50)} ms, p95 {ms(h.latency_ms.p95)} ms, max "
                     f"{ms(h.latency_ms.max)} ms; {h.slow} polls slower than health_timeout_s "
                     f"({r.profile['watch']['health_timeout_s']:g} s).")
    live = r.liveness
    if live is not None:
        probe = (f"A liveness probe with timeout {live.timeout_s:g} s, period {live.period_s:g} s and "
                 f"{live.failures} failures")
        lines.append(f"{probe} would have restarted the engine at t = {live.would_restart_at_s:.1f} s."
                     if live.would_restart_at_s is not None else f"{probe} would not have restarted the engine.")
    c = r.canary
    if c is not None:
        outcomes = ", ".join(f"{k} {v}" for k, v in c.by_outcome.items())
        lines.append(f"Canaries: {c.sent} sent ({outcomes}); time to their token p50 {ms(c.ttft_ms.p50)} ms, p95 "
                     f"{ms(c.ttft_ms.p95)} ms, max {ms(c.ttft_ms.max)} ms.")
    for w in r.watched_endpoints:
        state = f"died at {w.died_at_s:.1f} s" if w.died_at_s is not None else "did not die"
        kv = "" if w.kv_usage_peak is None else f"; KV usage peak {w.kv_usage_peak:.0%}, waiting peak " \
            f"{count(w.waiting_peak)}"
        lines.append(f"Watched {w.name} ({w.health_url or w.metrics_url}): {w.polls} /health polls, {w.not_ok} not "
                     f"200; {state}{kv}.")
    return lines


def answer_lines(r: RunReport) -> tuple[str, list[list[str]]]:
    """What the answer check found, in a sentence, and the wrong answers as table rows (report.md and .html)."""
    o = r.outputs
    if o is None:
        return "", []
    ties = f" (margins up to {o.near_tie_margin_max:.2f} nats)" if o.near_tie_margin_max is not None else ""
    said = (f"{o.checked} answers under load ({o.mode}) checked against the same request sent alone, over their "
            f"first {o.compare_tokens} tokens: {o.identical} identical, {o.near_tie} near-ties{ties}, "
            f"{o.diverged} diverged (the reference led its runner-up by at least {o.min_margin:g} nats), "
            f"{o.garbled} garbled, {o.cross_talk} cross-talk, {o.unverifiable} unverifiable.")
    rows = [[str(w.request), f"{w.conversation}/{w.turn}", w.kind, "" if w.position is None else str(w.position),
             repr(w.load_token) if w.load_token else "", repr(w.reference_token) if w.reference_token else "",
             "" if w.margin is None else f"{w.margin:.2f}", "" if w.cached_tokens is None else f"{w.cached_tokens:,}",
             w.detail] for w in o.worst]
    return said, rows


ANSWER_HEADINGS = ("request", "conversation/turn", "kind", "position", "under load", "alone", "margin (nats)",
                   "cached tokens", "detail")


def _answers(r: RunReport) -> list[str]:
    said, rows = answer_lines(r)
    if not said:
        return []
    lines = ["## Answers", "", said, ""]
    if rows:
        lines += ["| " + " | ".join(ANSWER_HEADINGS) + " |", "|" + "---|" * len(ANSWER_HEADINGS)]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows] + [""]
    return lines


ENDPOINT_HEADINGS = ("replica", "URL", "requests", "outcomes", "TTFT p50 (ms)", "TTFT p95 (ms)", "/health before",
                     "/health after", "slow polls", "died at (s)")


def endpoint_rows(r: RunReport) -> list[list[str]]:
    """Each replica's figures, the target first, as table rows (report.md and .html)."""
    return [[e.name, e.url, f"{e.requests:,}", ", ".join(f"{k} {v:,}" for k, v in e.by_outcome.items()),
             ms(e.ttft_ms.p50), ms(e.ttft_ms.p95), health_said(e.health.pre), health_said(e.health.post),
             str(e.health.slow),
             "-" if e.died_at_s is None else f"{e.died_at_s:.1f}"] for e in r.endpoints]


def _endpoints(r: RunReport) -> list[str]:
    rows = endpoint_rows(r)
    if not rows:
        return []
    return ["## Replicas", "", f"Routing: {r.profile.get('target', {}).get('routing', 'round_robin')}.", "",
            "| " + " | ".join(ENDPOINT_HEADINGS) + " |", "|" + "---|" * len(ENDPOINT_HEADINGS),
            *("| " + " | ".join(cell(c) for c in row) + " |" for row in rows), ""]


def _health(r: RunReport) -> list[str]:
    lines = ["## Health", "", f"| t (s) | {r.health.path} |", "|---:|---|"]
    lines += [f"| {max(t.t_s, 0.0):.1f} | {t.status} |" for t in r.health.transitions]
    lines += ["", f"Before the run: {health_said(r.health.pre)}; after the run: {health_said(r.health.post)}."]
    for line in health_lines(r):
        lines += ["", line]
    return lines + [""]


def _first_failure(r: RunReport) -> list[str]:
    f = r.first_failure
    if f is None:
        return []
    lines = ["## First failure", "",
             f"Request {f.request} (conversation {f.conversation}, turn {f.turn}) at {f.t_s:.1f} s: `{f.outcome}`"
             + (f", HTTP {f.status}" if f.status else ""), ""]
    lines += _fence(f.detail.splitlines() or ["(no text)"])
    if r.log_excerpt:
        shown = r.log_excerpt[-EXCERPT_LINES:]
        lines += ["", f"Engine log up to the first fatal line (last {len(shown)} lines):", ""] + _fence(shown)
    return lines + [""]


def _signatures(r: RunReport) -> list[str]:
    if not r.signatures:
        return []
    lines = ["## Signatures", "", "| signature | class | requests (failed) | log lines | first seen (s) | sample |",
             "|---|---|---:|---:|---:|---|"]
    lines += [f"| {s.name} | {s.class_} | {s.requests} ({s.failed_requests}) | {s.log_lines} | {s.first_t_s:.1f} | "
              f"{cell(s.sample[:120])} |" for s in r.signatures]
    return lines + [""]


def prefix_reuse_line(r: RunReport) -> str:
    """The prompt tokens a perfect prefix cache could have served against those the engine reported cached."""
    reuse = r.workload.prefix_reuse
    if reuse is None or not reuse.possible_tokens:
        return ""
    could = (f"A perfect prefix cache could have served {reuse.possible_tokens:,} prompt tokens of the completed "
             "requests" + ("" if reuse.own_tokens is None else
                           f" ({reuse.own_tokens:,} their own tree had sent before, "
                           f"{reuse.possible_tokens - reuse.own_tokens:,} only other trees)"))
    if reuse.cached_tokens is None:
        return could + "; the target reports no cached tokens."
    share = f" ({reuse.ratio:.0%})" if reuse.ratio is not None else ""
    return f"{could}; the engine reported {reuse.cached_tokens:,} of theirs cached{share}."


def _numbers(r: RunReport) -> list[str]:
    c = r.cache
    lines = ["## Latency, throughput, cache", "", "| ms | p50 | p95 | p99 | max | over |",
             "|---|---:|---:|---:|---:|---|", *(_row(*row) for row in latency_rows(r)), "",
             "Over every request of the run, its ramp-up included"
             + (f" (the service level below is judged from {r.slo.from_s} s, the steady state)."
                if r.slo is not None and r.slo.steady_state else "."),
             f"{r.throughput.requests_per_s:,.2f} completed requests/s, "
             f"{r.throughput.output_tokens_per_s:,.1f} output tokens/s."]
    if c.cached_tokens is None:
        lines.append("The target reported no cached prompt tokens.")
    else:
        share = c.cached_tokens / c.prompt_tokens if c.prompt_tokens else 0.0
        lines.append(f"Cached prompt tokens: {c.cached_tokens:,} of {c.prompt_tokens:,} ({share:.0%}).")
    if reuse := prefix_reuse_line(r):
        lines.append(reuse)
    p = r.pressure
    if p.kv_usage_peak is not None:
        pools = "".join(f", {pool} pool peak {share:.0%}" for pool, share in p.pool_usage_peak.items())
        lines.append(f"Engine metrics: KV usage peak {p.kv_usage_peak:.0%}{pools}, waiting peak "
                     f"{p.waiting_peak or 0:.0f}, preemptions {p.preemptions or 0:.0f}.")
    return lines + [""]


def _structured(r: RunReport) -> list[str]:
    s = r.structured_outputs
    if s is None:
        return []
    unchecked = f", {s.unchecked:,} to a grammar (not checked)" if s.unchecked else ""
    line = (f"Structured answers ({s.format}): {s.answers:,} completed, {s.cut:,} cut at max_tokens{unchecked}; "
            f"{s.unparsed:,} of those that ended on their own were not what they asked for")
    refused = (f" {s.refused:,} were refused, not judged (the first, request {s.first_refused_request}: "
               f"{s.first_refusal!r})." if s.refused else "")
    return ["## Structured answers", "", line + (f" (the first, request {s.first_unparsed_request}: "
                                                 f"{s.first_unparsed!r})." if s.unparsed else ".") + refused, ""]


def _memory(r: RunReport) -> list[str]:
    m = r.engine_memory
    if m is None:
        return []
    rate = (f", {m.growth_per_1000_requests_mb:g} MiB per 1,000 requests after the warm-up (r {m.r:.2f})"
            if m.growth_per_1000_requests_mb is not None and m.r is not None else "")
    swap = f"; up to {m.swap_peak_mb:g} MiB swapped" if m.swap_peak_mb else ""
    anon = f" ({m.anon_end_mb:g} anonymous)" if m.anon_end_mb is not None else ""
    whose = "" if m.source == "proc" else " (the serving process's, as its /metrics publish it)"
    bounded = (", levelled off by the end" if m.plateaued else "") + \
        (f", its prompt cache in RAM may keep up to {m.cache_cap_mb:g} MiB" if m.cache_cap_mb is not None else "")
    growth = f"growth not judged: {m.not_judged}" if m.not_judged else \
        f"{m.growth_mb:+g} MiB from the warm-up's end{rate}{bounded}"
    return ["## Engine memory", "", f"Resident{whose} {m.start_mb:g} MiB at the start, {m.peak_mb:g} at the peak, "
            f"{m.end_mb:g} idle at the end{anon}: {growth}{swap}" +
            ("." if m.not_judged and m.not_judged.startswith(f"{m.readings} readings") else
             f"; {m.readings} readings."), ""]


def _speculative(r: RunReport) -> list[str]:
    s = r.speculative
    if s is None:
        return []
    thirds = "of them" if s.source == "requests" else "of the run"
    trend = (f"; the first third {thirds} {s.early_rate:.0%}, the last third {s.late_rate:.0%}"
             if s.early_rate is not None and s.late_rate is not None else "")
    who = f"{s.requests:,} requests" if s.source == "requests" else "The engine (its /metrics counters)"
    return ["## Speculative decoding", "", f"{who} drafted {s.draft_tokens:,} tokens, "
            f"{s.accepted_tokens:,} accepted ({s.acceptance_rate:.0%}){trend}.", ""]


def _agents(r: RunReport) -> list[str]:
    a = r.agents
    if a is None:
        return []
    makespan = (f"; makespan p50 {a.makespan_s_p50:.1f} s, p95 {a.makespan_s_p95:.1f} s"
                if a.makespan_s_p50 is not None and a.makespan_s_p95 is not None else "")
    return ["## Agent trees", "", f"{a.trees:,} agents spawned {a.subagents:,} subagents (at most {a.fanout_max} "
            f"each); {a.completed:,} trees completed{makespan}. {a.joins:,} turns waited for their subagents, "
            f"{a.join_wait_s_total:.1f} s in all (the longest {a.join_wait_s_max:.1f} s).", ""]


def capacity_section(r: RunReport) -> list[str]:
    """The capacity arithmetic of a run and how its predictions fared (also in shrink.md)."""
    c = r.capacity
    if c is None:
        return []
    pools = f"pool {c.pool_tokens:,} tokens ({c.tokens_per_block} per block, beam width {c.beam_width})"
    if c.draft_pool_tokens is not None:
        pools += f", draft pool {c.draft_pool_tokens:,} tokens"
    if c.index_entries is not None:
        pools += f", page-index table {c.index_entries} entries"
    lines = ["## Capacity", "", f"From {c.source}: {pools}, max length {c.max_seq_len:,}.", "",
             "| prediction | outcomes |", "|---|---|"]
    lines += [f"| {fit} | {', '.join(f'{k} {v}' for k, v in outcomes.items())} |"
              for fit, outcomes in c.outcomes_by_prediction.items()]
    return lines + [""]


def _diagnosis(r: RunReport) -> list[str]:
    d = r.diagnosis
    if d is None:
        return []
    verdict = verdict_words(d.fatal, d.failed_requests, d.pressure_only, d.failed)
    lines = ["## Diagnosis", "", f"Engine: {verdict}."]
    if d.initiating:
        i = d.initiating
        lines.append(f"Initiating: {i.process}, `{i.signature}` at line {i.line}" + (f" ({i.timestamp})" if
                                                                                     i.timestamp else "") + ".")
    for c in d.collateral:
        lines.append(f"Collateral: {c.process}, `{c.signature}` at line {c.line}.")
    if d.capacity:
        lines.append(f"Capacity: {d.capacity}.")
    lines += ["", f"Next step: {d.next_step}", ""]
    if d.verification:
        lines += [f"Verify: `{d.verification}`", ""]
    return lines


def rules_checked(fired: int, quiet: int) -> str:
    """The rules that did not fire, counted in words (report.md names them, report.html folds what each looks for)."""
    return (f"{quiet} more rules checked, none of them fired" if fired
            else f"All {quiet} rules checked, none of them fired")


def _rules(r: RunReport) -> list[str]:
    """The rules that fired, with what each found; then one line naming every other rule the run was judged by (a
    row of dashes each said little of what the run was checked for)."""
    fired = [x for x in r.rules if x.fired]
    quiet = [x.name for x in r.rules if not x.fired]
    lines = ["## Rules", ""]
    if fired:
        lines += ["| rule | result | detail |", "|---|---|---|",
                  *(f"| {x.name} | {x.severity} | {cell(x.detail)} |" for x in fired), ""]
    if quiet:
        lines += [f"{rules_checked(len(fired), len(quiet))}: {', '.join(quiet)}.", ""]
    return lines + [f"Note: {cell(n)}" for n in r.notes]


def _pictures(r: RunReport) -> list[str]:
    return ["## Timeline", "", "![requests in flight, outcomes, /health and KV usage over time](timeline.png)", "",
            "![latency distributions](latency.png)", "", _PAGE, ""]


_PAGE = "The timeline to zoom into, each request named on hover: [report.html](report.html)."


def _page(r: RunReport) -> list[str]:
    return ["## Timeline", "", _PAGE, ""]


def render_markdown(report: RunReport, images: bool = False, page: bool = False) -> str:
    """With `images`, refers to timeline.png and latency.png written beside it; with `page` (and no images), links
    report.html."""
    sections = [_header, trials_section, _target, _workload, _outcomes, _endpoints, _answers, chaos_section,
                _health, _first_failure, _diagnosis, _signatures, _numbers, _memory, _speculative, _structured,
                _agents, slo_section, windows_section, capacity_section, _rules]
    if images or page:
        sections.insert(4, _pictures if images else _page)
    return "\n".join(line for section in sections for line in section(report)).rstrip() + "\n"


