"""The timeline drawn by the browser, inside report.html: the run's series embedded as JSON and drawn with uPlot
(vendored in report/vendor, MIT: 51 KB, canvas-drawn, made for 100,000s of points; no network, no CDN). Three panels
share the time axis: a drag zooms all of them into that stretch (a double click zooms back out), and pointing at a
request's tick says which request it was, how it ended and what it got."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

from loadrepro.report.timeline import Timeline

MAX_POINTS = 100_000  # per series: a soak's series thinned to this many, evenly


def _vendored(name: str) -> str:
    return resources.files("loadrepro.report").joinpath("vendor", name).read_text(encoding="utf-8")


def _thin(*columns: np.ndarray) -> list[list[float]]:
    if not len(columns[0]):
        return [[] for _ in columns]
    keep = np.unique(np.linspace(0, len(columns[0]) - 1, min(len(columns[0]), MAX_POINTS)).astype(int))
    return [[round(float(v), 4) for v in c[keep]] for c in columns]


def _series(t: Timeline) -> dict[str, object]:
    """What the page draws, as columns: times in seconds since the load started."""
    lanes = sorted(t.lanes, key=lambda lane: lane.end_s)[:MAX_POINTS]
    usage = t.kv_usage * 100 if len(t.kv_usage) else t.kv_usage
    return {
        "label": t.label, "duration": round(t.duration_s, 3), "health_path": t.health_path,
        "inflight": _thin(t.in_flight_t, t.in_flight_n),
        "requests": [[round(lane.end_s, 4), round(lane.start_s, 4), lane.request, lane.conversation, lane.turn,
                      lane.outcome, lane.detail] for lane in lanes],
        "health": _thin(t.health_t, t.health_latency_s, t.health_ok),
        "kv": _thin(t.kv_t, usage), "waiting": _thin(t.waiting_t, t.waiting),
        "marks": {"first failure": t.first_failure_s, "first fatal log line": t.first_fatal_s},
        "trees": [list(tree) for tree in t.trees],
    }


_SCRIPT = r"""
(function () {
  const d = JSON.parse(document.getElementById("timeline-data").textContent);
  const colours = {ok: "#2e7d32", rejected: "#f9a825", throttled: "#f9a825", cancelled: "#9e9e9e"};
  const colour = o => colours[o] || "#c62828";
  const width = () => Math.min(1100, document.getElementById("timeline-charts").clientWidth || 1100);
  const charts = [];
  let syncing = false;
  const zoomAll = u => {
    if (syncing) return;
    syncing = true;
    const x = u.scales.x;
    charts.forEach(c => { if (c !== u) c.setScale("x", {min: x.min, max: x.max}); });
    syncing = false;
  };
  const marks = u => {
    const ctx = u.ctx;
    Object.entries(d.marks).forEach(([name, at]) => {
      if (at === null) return;
      const x = u.valToPos(at, "x", true);
      ctx.save(); ctx.strokeStyle = name === "first failure" ? "#c62828" : "#000";
      ctx.setLineDash([5, 4]); ctx.beginPath(); ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke(); ctx.restore();
    });
  };
  // Every y axis as wide, and room on the right where a panel has no second one: the panels' time axes line up.
  const opts = (title, series, axes, height) => ({
    title, width: width(), height, series: [{}, ...series],
    axes: [{}, ...axes.map(a => Object.assign({size: 60}, a))], padding: [8, axes.length > 1 ? 8 : 98, 0, 0],
    // the whole run at first (not only where a panel has data), then what a zoom asks for
    scales: {x: {time: false, range: (u, min, max) => u.status === 1 ? [min, max] : [0, d.duration]}},
    cursor: {sync: {key: "timeline"}, drag: {x: true, y: false}},
    hooks: {setScale: [(u, key) => { if (key === "x") zoomAll(u); }], draw: [marks]},
  });
  const place = (o, data) => {
    const u = new uPlot(o, data, document.getElementById("timeline-charts"));
    charts.push(u);
    return u;
  };
  // Each request's end as a tick along the top, drawn straight on the canvas (a series of 100,000 points, joined
  // to the in-flight times, cost the browser seconds), only those in the stretch shown.
  const ends = d.requests.map(r => r[0]);
  const byOutcome = {};
  d.requests.forEach(r => (byOutcome[r[5]] = byOutcome[r[5]] || []).push(r[0]));
  const tickMarks = u => {  // one mark a pixel column and outcome: a soak's 100,000 ends in a few hundred
    const ctx = u.ctx, {min, max} = u.scales.x, px = devicePixelRatio, {left, top, width} = u.bbox;
    Object.entries(byOutcome).forEach(([o, times]) => {
      const marked = new Uint8Array(Math.ceil(width) + 1);
      for (const t of times) {
        if (t >= min && t <= max) marked[Math.round((t - min) / (max - min) * width)] = 1;
      }
      ctx.fillStyle = colour(o);
      marked.forEach((on, x) => { if (on) ctx.fillRect(left + x - px, top, 2 * px, 12 * px); });
    });
  };
  const legend = document.getElementById("timeline-ticks");
  Object.entries(byOutcome).sort().forEach(([o, times]) => {
    const key = document.createElement("span");
    key.style.color = colour(o);
    key.textContent = "\u258c " + o + " (" + times.length + ")  ";
    legend.appendChild(key);
  });
  const title = d.label + ": requests in flight and when each ended (drag to zoom, double-click to zoom out)";
  const loadOpts = opts(title, [{label: "in flight", stroke: "#1565c0", width: 1.5,
                                 paths: uPlot.paths.stepped({align: 1})}], [{label: "requests"}], 260);
  loadOpts.scales.y = {range: (u, min, max) => [0, Math.max(1, max) * 1.15]};  // room for the ticks above
  loadOpts.hooks.draw.push(tickMarks);
  const first = place(loadOpts, d.inflight);
  const hover = document.getElementById("timeline-hover");
  first.over.addEventListener("mousemove", e => {
    const at = first.posToVal(e.offsetX, "x");
    let lo = 0, hi = ends.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (ends[mid] < at) lo = mid + 1; else hi = mid; }
    const near = [lo - 1, lo].filter(i => i >= 0 && i < ends.length)
      .sort((a, b) => Math.abs(ends[a] - at) - Math.abs(ends[b] - at))[0];
    if (near === undefined || Math.abs(first.valToPos(ends[near], "x") - e.offsetX) > 6) return;
    const r = d.requests[near];
    hover.textContent = "request " + r[2] + " (conversation " + r[3] + ", turn " + r[4] + "): " + r[5] +
      "; sent " + r[1].toFixed(3) + " s, ended " + r[0].toFixed(3) + " s" + (r[6] ? "; " + r[6] : "");
  });
  const [polled, took, ok] = d.health;
  const unhealthy = u => {  // red from each poll that was not 200 until the next poll
    const ctx = u.ctx;
    ctx.save(); ctx.fillStyle = "rgba(198, 40, 40, 0.25)";
    ok.forEach((good, i) => {
      if (good) return;
      const a = u.valToPos(polled[i], "x", true), b = u.valToPos(polled[i + 1] ?? d.duration, "x", true);
      ctx.fillRect(a, u.bbox.top, Math.max(b - a, 2), u.bbox.height);
    });
    ctx.restore();
  };
  const healthOpts = opts(d.health_path + ": how long each poll took (red where it was not 200)",
    [{label: "answered in (s)", stroke: "#212121", points: {show: true, size: 3}}], [{label: "s"}], 160);
  healthOpts.hooks.draw.push(unhealthy);
  place(healthOpts, [polled, took]);
  place(Object.assign(opts("the engine's KV usage and requests waiting",
    [{label: "KV usage %", stroke: "#6a1b9a", scale: "%", paths: uPlot.paths.stepped({align: 1})},
     {label: "waiting", stroke: "#ef6c00", scale: "n", paths: uPlot.paths.stepped({align: 1})}],
    [{label: "KV %", scale: "%"}, {label: "waiting", scale: "n", side: 1}], 180)),
    uPlot.join([d.kv, d.waiting]));
  lanes();
  window.loadreproCharts = charts;

  // Conversation lanes: each request a bar from sent to end on its conversation's row, the first conversation at
  // the top; an agent's subagents on the rows below it, each agent tree on a band of its own.
  function lanes() {
    const rowOf = new Map(), treeOf = new Map(), bands = [];
    d.trees.forEach((tree, k) => {
      const top = rowOf.size;
      tree.forEach(c => { if (!rowOf.has(c)) { rowOf.set(c, rowOf.size); treeOf.set(c, k); } });
      bands.push([top, rowOf.size]);
    });
    [...new Set(d.requests.map(r => r[3]))].sort((a, b) => a - b)
      .forEach(c => { if (!rowOf.has(c)) rowOf.set(c, rowOf.size); });
    const rows = rowOf.size;
    if (!rows) return;
    const byRow = Array.from({length: rows}, () => []);
    d.requests.forEach(r => byRow[rowOf.get(r[3])].push(r));
    const y = row => rows - 1 - row;  // the first row at the top
    const bars = u => {
      const ctx = u.ctx, {min, max} = u.scales.x, {left, top, width, height} = u.bbox;
      const h = Math.max(1, Math.min(8 * devicePixelRatio, height / rows * 0.7));
      ctx.save();
      ctx.fillStyle = "rgba(21, 101, 192, 0.07)";
      bands.forEach(([a, b], k) => {
        if (k % 2) return;
        const y0 = u.valToPos(y(a) + 0.5, "y", true), y1 = u.valToPos(y(b - 1) - 0.5, "y", true);
        ctx.fillRect(left, y0, width, y1 - y0);
      });
      byRow.forEach((requests, row) => {
        const at = u.valToPos(y(row), "y", true) - h / 2;
        requests.forEach(r => {
          if (r[0] < min || r[1] > max) return;
          const x0 = u.valToPos(r[1], "x", true), x1 = u.valToPos(r[0], "x", true);
          ctx.fillStyle = colour(r[5]);
          ctx.fillRect(x0, at, Math.max(x1 - x0, devicePixelRatio), h);
        });
      });
      ctx.restore();
    };
    const title = "each request from sent to end, a row per conversation" +
      (bands.length ? " (an agent's subagents below it; a band per agent tree)" : "");
    const laneOpts = opts(title, [{label: "conversation", show: false}],
      [{label: "conversation", values: () => []}], Math.min(420, Math.max(120, rows * 10 + 40)));
    laneOpts.scales.y = {range: () => [-0.5, rows - 0.5]};
    laneOpts.hooks.draw.push(bars);
    const u = place(laneOpts, [[0, d.duration], [0, 0]]);
    u.laneOf = c => y(rowOf.get(c));  // where a conversation's row is on the y scale (for a test to point at)
    u.over.addEventListener("mousemove", e => {
      const at = u.posToVal(e.offsetX, "x"), row = rows - 1 - Math.round(u.posToVal(e.offsetY, "y"));
      const r = (byRow[row] || []).find(r => r[1] <= at && at <= r[0]);
      if (!r) return;
      const tree = treeOf.has(r[3]) ? "; agent tree " + (treeOf.get(r[3]) + 1) + " of " + bands.length : "";
      hover.textContent = "request " + r[2] + " (conversation " + r[3] + ", turn " + r[4] + tree + "): " + r[5] +
        "; sent " + r[1].toFixed(3) + " s, ended " + r[0].toFixed(3) + " s" + (r[6] ? "; " + r[6] : "");
    });
  }
})();
"""


def interactive_timeline(t: Timeline) -> str:
    """The section's HTML: the charts' place, the series as JSON, the vendored library and the drawing script."""
    data = json.dumps(_series(t), separators=(",", ":")).replace("</", "<\\/")  # no early end of its script tag
    return (f"<style>{_vendored('uPlot.min.css')}</style><div id=timeline-charts></div>"
            "<p id=timeline-ticks class=hover>Ticks along the top, each request as it ended: </p>"
            "<p id=timeline-hover class=hover>Point at a request's tick to see it here.</p>"
            f"<script type=application/json id=timeline-data>{data}</script>"
            f"<script>{_vendored('uPlot.iife.min.js')}</script><script>{_SCRIPT}</script>")
