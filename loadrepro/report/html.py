"""report.html: one self-contained page (pictures as inline PNG data, CSS, the timeline drawn by a vendored script;
no external URL)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from loadrepro.judge.classify import RULES
from loadrepro.judge.windows import REFERENCE_WINDOW
from loadrepro.report.interactive import SCRIPTS
from loadrepro.report.long_run_markdown import CHAOS_HEADINGS, chaos_rows, slo_lines
from loadrepro.report.markdown import (
    ANSWER_HEADINGS,
    ENDPOINT_HEADINGS,
    answer_lines,
    endpoint_rows,
    health_lines,
    latency_rows,
    prefix_reuse_line,
    rules_checked,
)
from loadrepro.schema.report_sections import Percentiles
from loadrepro.schema.run_report import RunReport

if TYPE_CHECKING:  # a run's own reports compare nothing: comparisons and sweeps import these themselves
    from loadrepro.compare.comparison import Comparison

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1180px;margin:24px auto;padding:0 16px;
color:#212121;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.verdict{display:inline-block;padding:.15em .6em;border-radius:4px;color:#fff;font-weight:600}
.pass{background:#2e7d32}.fail{background:#c62828}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}td,th{border:1px solid #ddd;padding:.3em .6em;
text-align:left;vertical-align:top}th{background:#f5f5f5}td.n{text-align:right}
pre{background:#f7f7f7;border:1px solid #e0e0e0;padding:.7em;overflow-x:auto;font-size:.85em}
figure{margin:1em 0}figcaption{color:#555;font-size:.9em}figure img{max-width:100%;height:auto}
code{background:#f3f3f3;padding:0 .2em}
[data-loadrepro-chart^=sweep],[data-loadrepro-chart^=latency]{display:flex;flex-wrap:wrap;gap:16px}.hover{font-family:monospace;font-size:.85em;color:#333;min-height:1.4em}
.pointed{position:sticky;bottom:0;background:#fff;border-top:1px solid #ddd;margin:0;padding:.4em 0}
"""


def html_table(head: list[str], rows: list[list[object]]) -> str:
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(
        f"<td class=n>{escape(str(c))}</td>" if isinstance(c, (int, float)) else f"<td>{escape(str(c))}</td>"
        for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def img(png: bytes, alt: str) -> str:
    """A picture inside the page: the same PNG bytes the run directory holds (drawn once, for both)."""
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _figure(picture: str, caption: str, data: str = "") -> str:
    return f"<figure{data}>{picture}<figcaption>{escape(caption)}</figcaption></figure>"


def _timeline_data(r: RunReport) -> str:
    """The timeline's marks as attributes too, so scripts and tests can read what the picture shows."""
    health = ";".join(f"{t.t_s:.3f}:{t.status}" for t in r.health.transitions)
    failure = f"{r.first_failure.t_s:.3f}" if r.first_failure else ""
    windows = ";".join(f"{w.start_s:g}-{w.end_s:g}:{w.ttft_p50_ms}:{w.ttft_p95_ms}:{w.failed}/{w.requests}"
                       for w in r.windows)
    reference = r.windows[REFERENCE_WINDOW] if len(r.windows) > REFERENCE_WINDOW else None
    marked = f"{reference.start_s:g}-{reference.end_s:g}" if reference else ""
    return (f' id=timeline data-health="{escape(health)}" data-first-failure-s="{failure}" '
            f'data-windows="{escape(windows)}" data-reference-window-s="{marked}"')


def _ms(p: Percentiles) -> list[str]:
    return ["-" if v is None else f"{v:,.1f}" for v in (p.p50, p.p95, p.p99, p.max)]


def html_page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n{body}\n</body></html>\n")


LATENCY_CAPTION = "Distributions over the requests sent and kept in memory (each title says how many)."


def _sections(r: RunReport, latency: str) -> str:
    parts = [f"<h2>Latency</h2>{latency}",
             "<h2>Outcomes</h2>" + html_table(["outcome", "requests"],
                                              [[k, v] for k, v in r.requests.by_outcome.items()]),
             "<h2>Numbers</h2>" + html_table(["ms", "p50", "p95", "p99", "max", "over"],
                                             [[name, *_ms(p), over] for name, p, over in latency_rows(r)])
             + f"<p>{r.throughput.requests_per_s:,.2f} completed requests/s, "
               f"{r.throughput.output_tokens_per_s:,.1f} output tokens/s; cached prompt tokens: "
               f"{'not reported' if r.cache.cached_tokens is None else f'{r.cache.cached_tokens:,}'} of "
               f"{r.cache.prompt_tokens:,}.</p>"
             + (f"<p>{escape(reuse)}</p>" if (reuse := prefix_reuse_line(r)) else "")
             + "".join(f"<p>{escape(line)}</p>" for line in health_lines(r))]
    if replicas := endpoint_rows(r):
        parts.append("<h2>Replicas</h2>" + html_table(list(ENDPOINT_HEADINGS), [list(row) for row in replicas]))
    if slo := slo_lines(r):
        parts.append("<h2>Service level</h2>" + "".join(f"<p>{escape(line)}</p>" for line in slo))
    said, rows = answer_lines(r)
    if said:
        parts.append(f"<h2>Answers</h2><p>{escape(said)}</p>"
                     + (html_table(list(ANSWER_HEADINGS), [list(row) for row in rows]) if rows else ""))
    if chaos := chaos_rows(r):
        parts.append("<h2>Faults on purpose</h2>" + html_table(list(CHAOS_HEADINGS), [list(row) for row in chaos]))
    if r.signatures:
        parts.append("<h2>Signatures</h2>" + html_table(
            ["signature", "class", "requests (failed)", "log lines", "first seen (s)", "sample"],
            [[s.name, s.class_, f"{s.requests} ({s.failed_requests})", s.log_lines, f"{s.first_t_s:.2f}",
              s.sample[:200]] for s in r.signatures]))
    if r.capacity:
        parts.append("<h2>Capacity</h2>" + html_table(["prediction", "outcomes"], [
            [fit, ", ".join(f"{k} {v}" for k, v in o.items())]
            for fit, o in r.capacity.outcomes_by_prediction.items()]))
    parts.append(_rules(r))
    if r.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in r.notes) + "</ul>")
    if r.first_failure:
        f = r.first_failure
        parts.append(f"<h2>First failure</h2><p>Request {f.request} (conversation {f.conversation}, turn {f.turn}) "
                     f"at {f.t_s:.2f} s: <code>{escape(f.outcome)}</code></p><pre>{escape(f.detail)}</pre>")
    if r.log_excerpt:
        parts.append("<h2>Engine log up to the first fatal line</h2><pre>"
                     + escape("\n".join(r.log_excerpt)) + "</pre>")
    return "\n".join(parts)


def _rules(r: RunReport) -> str:
    """The rules that fired, with what each found; then, folded, every other rule the run was judged by with what
    it looks for: a row of dashes a rule said little of what the run was checked for."""
    fired = [x for x in r.rules if x.fired]
    quiet = [x.name for x in r.rules if not x.fired]
    table = html_table(["rule", "result", "detail"], [[x.name, x.severity or "", x.detail] for x in fired])
    checked = rules_checked(len(fired), len(quiet))
    looks = rule_checks()
    folded = (f"<details><summary>{checked}: what each looks for</summary>"
              + html_table(["rule", "looks for"], [[name, looks.get(name, "")] for name in quiet]) + "</details>")
    return "<h2>Rules</h2>" + (table if fired else "") + (folded if quiet else "")


def rule_checks() -> dict[str, str]:
    """Each rule's name and the first sentence of its docstring (the rule's own words of what it detects)."""
    return {rule.__name__: _first_sentence(rule.__doc__ or "") for rule in RULES}


def _first_sentence(doc: str) -> str:
    words = " ".join(doc.split()).replace("`", "")
    depth = 0
    for i, c in enumerate(words):
        depth += (c == "(") - (c == ")")
        if c == "." and depth == 0 and words[i + 1:i + 2] in ("", " "):
            return words[:i + 1]
    return words


def _head(r: RunReport) -> str:
    reasons = "".join(f"<li>{escape(x)}</li>" for x in r.reasons) or "<li>no rule fired</li>"
    return (f"<h1>loadrepro: <span class='verdict {escape(r.verdict)}'>{escape(r.verdict.upper())}</span> "
            f"{escape(r.profile['name'])} ({escape(r.label)})</h1><ul>{reasons}</ul>"
            f"<p>Reproduce: <code>{escape(r.command)}</code><br>Target {escape(r.target.base_url)}, model "
            f"<code>{escape(r.target.model)}</code>; started {escape(r.started_at)}, {r.duration_s:.1f} s, stopped: "
            f"{escape(r.stop_reason)}; loadrepro {escape(r.environment.loadrepro_version)}.</p>")


def timeline_caption(health_path: str = "/health") -> str:
    return (f"Requests in flight (blue) with a tick where each request ended (coloured by outcome); {health_path} "
            "(green 200, red otherwise) with how long each poll took and the canaries' time to their token; the "
            "engine's KV usage and waiting requests. Dashed red line: the first failure; dotted black line: the "
            "first fatal engine log line.")


@dataclass(frozen=True, slots=True)
class Pngs:
    """The pictures of a run drawn as PNG (`--png`), each an <img> of the same bytes as its file."""

    timeline: str
    lanes: str
    latency: str


def render_html(report: RunReport, charts: Charts, pngs: Pngs | None = None) -> str:
    """The charts drawn by the browser (report/interactive.py); with `pngs`, the pictures below them."""
    timeline = charts.timeline
    latency = charts.latency
    if pngs is not None:
        timeline += _figure(pngs.timeline, timeline_caption(report.health.path), _timeline_data(report))
        timeline += _figure(pngs.lanes, "Each turn of each conversation, coloured by outcome.")
        latency += _figure(pngs.latency, LATENCY_CAPTION)
    body = _head(report) + f"<h2>Timeline</h2>{timeline}\n" + _sections(report, latency) + SCRIPTS
    return html_page(f"loadrepro {report.verdict}: {report.profile['name']} ({report.label})", body)


@dataclass(frozen=True, slots=True)
class Charts:
    """A page's charts drawn by the browser: its sections' HTML (the scripts that draw them go in at SCRIPTS)."""

    timeline: str
    latency: str


def render_comparison_html(comparison: Comparison, sides: Sequence[str], latency: str) -> str:
    """Each side's timeline (all zoomed together: one time axis) and both sides' latency by percentile."""
    table = html_table(["Test", comparison.stock_label, comparison.patched_label, "change"],
                   [[r.test, r.stock, r.patched, r.change] for r in comparison.rows])
    body = (f"<h1>loadrepro compare: {escape(comparison.conclusion)}</h1><p>{escape(comparison.detail)}</p>{table}"
            "<h2>Timelines</h2><p>A drag across any panel zooms both runs' panels to that stretch.</p>"
            + "".join(sides) + f"<h2>Latency</h2>{latency}" + SCRIPTS)
    return html_page(f"loadrepro compare: {comparison.conclusion}", body)
