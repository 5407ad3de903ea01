"""The sections of report.md that long runs and repeated runs add: trials, faults on purpose, the service level and
the windows."""

from __future__ import annotations

from loadrepro.report.cells import cell, count, ms, share, share_exact
from loadrepro.schema.run_report import RunReport

CHAOS_HEADINGS = ("at (s)", "fault", "recovered", "in (s)", "/health 200 (s)", "TTFT back (s)", "running back (s)",
                  "KV back (s)", "failed meanwhile", "detail")


def chaos_rows(r: RunReport) -> list[list[str]]:
    """Each fault on purpose and the engine's recovery, as table rows (report.md and .html)."""
    def s(x: float | None) -> str:
        return "" if x is None else f"{x:.1f}"

    said = {True: "yes", False: "NO", None: "never caused"}
    return [[f"{c.at_s:.1f}", c.action, said[c.recovered], s(c.recovery_s), s(c.health_s), s(c.ttft_s),
             s(c.running_s), s(c.kv_s), str(c.faulted), c.detail] for c in r.chaos]


def trials_section(r: RunReport) -> list[str]:
    t = r.trials
    if t is None:
        return []
    lo, hi = t.ci95
    lines = ["## Trials", "", f"{t.failed} of {t.n} trials failed ({t.failure_rate:.0%}; exact 95% interval "
             f"{lo:.0%}-{hi:.0%}){'' if t.n == t.planned else f', of {t.planned} asked for'}; "
             f"{'each with its own seed' if t.vary_seed else 'all with the same seed'}. Below, "
             f"{'the first failing trial' if t.failed else 'the last trial'}'s report.", ""]
    if t.signatures:
        lines += ["Failing rules: " + ", ".join(f"{k} in {v}" for k, v in t.signatures.items()) + ".", ""]
    lines += ["| trial | seed | verdict | failing rules | first failure (s) | directory |",
              "|---:|---:|---|---|---:|---|"]
    lines += [f"| {x.index} | {x.seed} | {x.verdict} | {', '.join(x.failing_rules)} | "
              f"{'' if x.first_failure_s is None else f'{x.first_failure_s:.1f}'} | {x.run_dir} |" for x in t.trials]
    return lines + [""]


def chaos_section(r: RunReport) -> list[str]:
    rows = chaos_rows(r)
    if not rows:
        return []
    lines = ["## Faults on purpose", "", "| " + " | ".join(CHAOS_HEADINGS) + " |", "|" + "---|" * len(CHAOS_HEADINGS)]
    return lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows] + [""]


def slo_lines(r: RunReport) -> list[str]:
    """The service level ([slo]) in sentences, for report.md and report.html."""
    s = r.slo
    if s is None:
        return []
    names = {"ttft": "TTFT", "itl": "ITL (a request's mean)", "e2e": "end to end"}
    limits = ", ".join(f"{names[name]} <= {limit:,g} ms" for name, limit in s.limits_ms.items())
    judged = (f"the {s.requests:,} requests sent from {s.from_s} s on: the steady state, from when the requests in "
              f"flight first reached their level of {s.in_flight_level:g} (the ramp-up before it is not judged; "
              "[slo] include_ramp_up = true judges it)" if s.steady_state else
              f"all {s.requests:,} requests, ramp-up included")
    share = "none judged" if s.attainment is None else f"{s.attainment:.1%}"
    whole = "" if s.whole_run_attainment is None or not s.steady_state else \
        f" (over the whole run, ramp-up included: {s.whole_run_attainment:.1%})"
    m = s.missed
    queue = "" if s.client_queue_p95_ms is None else \
        (f" loadrepro's own wait before sending a request (for a concurrency slot), p95 {s.client_queue_p95_ms:,.1f} "
         "ms, is not in these figures.")
    return [f"SLO: {limits}; judged: {judged}.",
            f"Attainment {share}: {s.met:,} met it{whole}; goodput {s.goodput_requests_per_s:,.2f} requests/s, "
            f"{s.goodput_tokens_per_s:,.1f} output tokens/s.",
            f"Missed: TTFT {m.ttft:,}, ITL {m.itl:,}, end to end {m.e2e:,}, failed {m.failed:,} (a request may miss "
            f"several limits; a failed one never meets the SLO).{queue}"]


def slo_section(r: RunReport) -> list[str]:
    lines = slo_lines(r)
    return ["## Service level", "", *lines, ""] if lines else []


MAX_WINDOW_ROWS = 48  # beyond, every k-th window (report.json has them all)


def windows_section(r: RunReport) -> list[str]:
    if not r.windows:
        return []
    step = -(-len(r.windows) // MAX_WINDOW_ROWS)
    shown = r.windows[::step] + ([r.windows[-1]] if (len(r.windows) - 1) % step else [])
    memory = any(w.memory_mb is not None for w in r.windows)
    lines = ["## Windows", "", f"{len(r.windows)} windows of {r.windows[0].end_s - r.windows[0].start_s:g} s"
             + (f", every {step}th shown" if step > 1 else "") + ".", "",
             "| window | s | requests | failed | TTFT p50 | TTFT p95 | ITL p50 | ITL p95 | KV peak | KV quiet | "
             "waiting | preemptions |" + (" SLO met |" if r.slo else "") + (" engine MiB |" if memory else ""),
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if r.slo else "")
             + ("---:|" if memory else "")]
    for w in shown:
        lines.append(f"| {w.index} | {w.start_s:g}-{w.end_s:g} | {w.requests} | {w.failed} | {ms(w.ttft_p50_ms)} | "
                     f"{ms(w.ttft_p95_ms)} | {ms(w.itl_p50_ms)} | {ms(w.itl_p95_ms)} | {share(w.kv_usage_max)} | "
                     f"{share(w.kv_usage_quiet)} | {count(w.waiting_max)} | {count(w.preemptions)} |"
                     + (f" {share_exact(w.slo_attainment)} |" if r.slo else "")
                     + (f" {'-' if w.memory_mb is None else f'{w.memory_mb:,.1f}'} |" if memory else ""))
    return lines + [""]
