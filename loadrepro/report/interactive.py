"""The charts drawn by the browser, inside report.html, compare.html and sweep.html: each section's series embedded as
JSON, drawn by report/charts.js with uPlot (vendored in report/vendor, MIT: 51 KB, canvas-drawn, made for 100,000s
of points; no network, no CDN). A timeline's panels share the time axis with every other time panel of the page: a
drag zooms all of them into that stretch (a double click zooms back out), and pointing at a request's tick or bar
says which request it was, how it ended and what it got."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from html import escape
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from loadrepro.records.redact import REDACTED, scrub
from loadrepro.report.timeline import Timeline

if TYPE_CHECKING:  # a run's own reports compare nothing: comparisons and sweeps import these themselves
    from loadrepro.schema.stress_report import PhaseRow
    from loadrepro.schema.sweep_report import SweepCurve

MAX_POINTS = 100_000  # per series: a soak's series thinned to this many, evenly
PERCENTILES = np.linspace(0, 100, 201)  # the latency chart's x: every half percentile


def _packaged(*path: str) -> str:
    return resources.files("loadrepro.report").joinpath(*path).read_text(encoding="utf-8")


def _number(v: float) -> float | None:
    return None if math.isnan(v) else round(v, 4)


def _thin(*columns: np.ndarray) -> list[list[float | None]]:
    if not len(columns[0]):
        return [[] for _ in columns]
    keep = np.unique(np.linspace(0, len(columns[0]) - 1, min(len(columns[0]), MAX_POINTS)).astype(int))
    return [[_number(float(v)) for v in c[keep]] for c in columns]


# Inside a <script> element the HTML parser ends it at "</script" and, after "<!--" then "<script", reads on past
# its own end tag; "&" and ">" matter where the text is read as HTML, U+2028 and U+2029 where it is read as
# JavaScript. JSON with these written as escapes (JSON has them only inside strings) holds none of them, and
# JSON.parse reads the same strings back.
_UNPARSED = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                           "\u2029": "\\u2029"})


def embedded_json(data: object) -> str:
    """`data` as JSON that may stand inside a page's <script> element as it is: no text in it, an engine's error
    text or a label, changes how the browser parses the page."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).translate(_UNPARSED)


def _data(element_id: str, data: object) -> str:
    return f"<script type=application/json id={element_id}>{embedded_json(data)}</script>"


def _series(t: Timeline) -> dict[str, object]:
    """What a timeline section draws, as columns: times in seconds since the load started."""
    lanes = sorted(t.lanes, key=lambda lane: lane.end_s)[:MAX_POINTS]
    usage = t.kv_usage * 100 if len(t.kv_usage) else t.kv_usage
    return {
        "label": t.label, "duration": round(t.duration_s, 3), "health_path": t.health_path,
        "inflight": _thin(t.in_flight_t, t.in_flight_n),
        "requests": [[round(lane.end_s, 4), round(lane.start_s, 4), lane.request, lane.conversation, lane.turn,
                      lane.outcome, lane.detail, lane.replica] for lane in lanes],
        "replicas": t.replicas,
        "health": _thin(t.health_t, t.health_latency_s, t.health_ok),
        "kv": _thin(t.kv_t, usage), "waiting": _thin(t.waiting_t, t.waiting),
        "memory": _thin(t.memory_t, *t.memory_mib.T),
        "faults": [[round(a, 3), round(b, 3), action] for a, b, action in t.chaos],
        "marks": {"first failure": t.first_failure_s, "first fatal log line": t.first_fatal_s},
        "trees": [list(tree) for tree in t.trees],
        # a long run's windows: start, end, TTFT p50 and p95 (ms), failed %; the reference window's index
        "windows": [[w.start_s, w.end_s, w.ttft_p50_ms, w.ttft_p95_ms,
                     round(100 * w.failed / w.requests, 2) if w.requests else None] for w in t.windows],
        # the watched endpoints and replicas: name, and each /health poll's time and whether it was 200
        "endpoints": [[e.name, *_thin(e.health_t, e.health_ok)] for e in t.endpoints],
    }


def timeline_section(t: Timeline, key: str = "timeline") -> str:
    """A run's timeline: its panels' place, the legend of its ticks, the line a hover fills, and its series. The
    line keeps to the window's foot while any of the panels shows (they are taller than a window): what a pointer
    names is read where the pointer is, not a scroll away."""
    return (f"<div class=timeline><div id={key}-charts data-loadrepro-chart=timeline:{key}></div>"
            f"<p id={key}-ticks class=hover>Ticks along the top, each request as it ended: </p>"
            f"<p id={key}-hover class='hover pointed'>Point at a request's tick or bar to see it here.</p></div>"
            + _data(f"{key}-data", _series(t)))


def _percentiles(values: np.ndarray) -> list[float | None]:
    if not len(values):
        return [None] * len(PERCENTILES)
    return [_number(float(v)) for v in np.percentile(values, PERCENTILES)]


def latency_section(timelines: Sequence[Timeline], key: str = "latency") -> str:
    """TTFT and end-to-end latency by percentile, a line each run."""
    runs = [{"label": t.label, "ttft": _percentiles(t.ttft_ms), "e2e": _percentiles(t.e2e_ms)} for t in timelines]
    return (f"<div id={key}-latency data-loadrepro-chart=latency:{key}></div>"
            + _data(f"{key}-latency-data", {"percentiles": [round(float(p), 1) for p in PERCENTILES], "runs": runs}))


_SWEEP_FIGURES = (("tps", "output tokens/s"), ("ttft50", "TTFT p50 ms"), ("ttft95", "TTFT p95 ms"),
                  ("itl50", "ITL p50 ms"), ("goodput", "goodput: requests/s that met the SLO"))


def sweep_section(curves: Sequence[SweepCurve], over: str, key: str = "sweep") -> str:
    """A sweep's curves against the load, each engine a line, a cross where it failed (a rule other than slo)."""
    drawn = []
    for c in curves:
        levels = sorted(c.levels, key=lambda lv: lv.value)
        drawn.append({
            "label": c.label, "x": [lv.value for lv in levels], "failed": [lv.broke for lv in levels],
            "tps": [lv.throughput.output_tokens_per_s for lv in levels],
            "ttft50": [lv.latency.ttft_ms.p50 for lv in levels], "ttft95": [lv.latency.ttft_ms.p95 for lv in levels],
            "itl50": [lv.latency.itl_ms.p50 for lv in levels],
            "goodput": [lv.slo.goodput_requests_per_s if lv.slo else None for lv in levels]})
    slo = any(v is not None for c in drawn for v in c["goodput"])
    figures = [list(f) for f in _SWEEP_FIGURES if slo or f[0] != "goodput"]
    unit = "requests in flight" if over == "concurrency" else "arrivals per second"
    return (f"<div id={key}-charts data-loadrepro-chart=sweep:{key}></div>"
            + _data(f"{key}-data", {"over": unit, "curves": drawn, "figures": figures}))


def stress_section(phases: Sequence[PhaseRow], key: str = "stress") -> str:
    """A battery's phases in order: TTFT p50 and p95 of each phase that ran, a cross where one failed."""
    ran = [p for p in phases if p.run_dir is not None]
    data = {"names": [p.name for p in ran], "ttft50": [p.ttft_p50_ms for p in ran],
            "ttft95": [p.ttft_p95_ms for p in ran], "failed": [p.verdict == "fail" for p in ran]}
    return f"<div id={key}-charts data-loadrepro-chart=stress:{key}></div>" + _data(f"{key}-data", data)


SCRIPTS = "<!--loadrepro:scripts-->"  # where a page's scripts go: put in after the page's text was scrubbed


def with_scripts(page: str) -> bytes:
    """The page scrubbed of secrets (records/redact.py), then its scripts put in at SCRIPTS: loadrepro's own code
    and the vendored library hold no secret, and scrubbing rewrote them (`first token" : "end` reads as one)."""
    return _shown(scrub(page)).replace(SCRIPTS, page_scripts(), 1).encode("utf-8")


_EMBEDDED = re.compile(r"(<script type=application/json id=[^>]*>)(.*?)(</script>)", re.DOTALL)


def _shown(page: str) -> str:
    """A scrubbed page with each <redacted> mark scrubbing put in written as text, in the JSON a chart is drawn from
    as in the page's own text: as it came, the browser took it for an element and showed nothing where the secret
    was. The embedded JSON holds no "<" of its own (embedded_json): its end tag is the first one after it."""
    if REDACTED not in page:  # most pages: no pass over a soak's megabytes of series
        return page

    def marked(found: re.Match[str]) -> str:
        return found.group(1) + found.group(2).replace(REDACTED, REDACTED.translate(_UNPARSED)) + found.group(3)

    return _EMBEDDED.sub(marked, page).replace(REDACTED, escape(REDACTED))


def page_scripts() -> str:
    """Once a page, after its sections: the library, its style, and what draws every section."""
    return (f"<style>{_packaged('vendor', 'uPlot.min.css')}</style>"
            f"<script>{_packaged('vendor', 'uPlot.iife.min.js')}</script><script>{_packaged('charts.js')}</script>")
