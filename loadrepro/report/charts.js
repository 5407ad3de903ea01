// The charts of loadrepro's pages, drawn by the browser with uPlot from the series each page embeds as JSON
// (report/interactive.py writes them). Every time panel of a page shares one zoom: a drag across one zooms all of
// them, a run's and, on compare.html, the other run's; a double click zooms back out.
(function () {
  const colours = {ok: "#2e7d32", rejected: "#f9a825", throttled: "#f9a825", cancelled: "#9e9e9e"};
  const colour = o => colours[o] || "#c62828";
  const charts = window.loadreproCharts = [];  // the time panels, all synced
  let syncing = false;
  const zoomAll = u => {
    if (syncing) return;
    syncing = true;
    const x = u.scales.x;
    charts.forEach(c => { if (c !== u) c.setScale("x", {min: x.min, max: x.max}); });
    syncing = false;
  };
  const clipped = u => {  // paint inside the plot only: a poll after the run's end is beyond its axis
    const {left, top, width, height} = u.bbox;
    u.ctx.save(); u.ctx.beginPath(); u.ctx.rect(left, top, width, height); u.ctx.clip();
  };
  const widthOf = el => Math.min(1100, el.clientWidth || 1100);
  const read = id => JSON.parse(document.getElementById(id).textContent);
  const said = (r, extra) => "request " + r[2] + " (conversation " + r[3] + ", turn " + r[4] + (extra || "") +
    "): " + r[5] + "; sent " + r[1].toFixed(3) + " s, ended " + r[0].toFixed(3) + " s" + (r[6] ? "; " + r[6] : "");

  function timeline(key) {
    const d = read(key + "-data"), box = document.getElementById(key + "-charts");
    const hover = document.getElementById(key + "-hover");
    const shade = u => {  // each fault on purpose, shaded until it recovered; the first failure, the fatal line
      const ctx = u.ctx, {top, height} = u.bbox;
      clipped(u);
      d.faults.forEach(([a, b]) => {
        const x0 = u.valToPos(a, "x", true), x1 = u.valToPos(b, "x", true);
        ctx.fillStyle = "rgba(239, 108, 0, 0.15)";
        ctx.fillRect(x0, top, Math.max(x1 - x0, 2), height);
      });
      Object.entries(d.marks).forEach(([name, at]) => {
        if (at === null) return;
        const x = u.valToPos(at, "x", true);
        ctx.strokeStyle = name === "first failure" ? "#c62828" : "#000";
        ctx.setLineDash([5, 4]); ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
      });
      ctx.restore();
    };
    // Every y axis as wide, and room on the right where a panel has no second one: the panels' time axes line up.
    const opts = (title, series, axes, height) => ({
      title, width: widthOf(box), height, series: [{}, ...series],
      axes: [{}, ...axes.map(a => Object.assign({size: 60}, a))], padding: [8, axes.length > 1 ? 8 : 98, 0, 0],
      // the whole run at first (not only where a panel has data), then what a zoom asks for
      scales: {x: {time: false, range: (u, min, max) => u.status === 1 ? [min, max] : [0, d.duration]}},
      cursor: {sync: {key: "timeline"}, drag: {x: true, y: false}},
      hooks: {setScale: [(u, k) => { if (k === "x") zoomAll(u); }], draw: [shade]},
    });
    const place = (o, data) => {
      const u = new uPlot(o, data, box);
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
    const legend = document.getElementById(key + "-ticks");
    Object.entries(byOutcome).sort().forEach(([o, times]) => {
      const item = document.createElement("span");
      item.style.color = colour(o);
      item.textContent = "\u258c " + o + " (" + times.length + ")  ";
      legend.appendChild(item);
    });
    const title = d.label + ": requests in flight and when each ended (drag to zoom, double-click to zoom out)";
    const loadOpts = opts(title, [{label: "in flight", stroke: "#1565c0", width: 1.5,
                                   paths: uPlot.paths.stepped({align: 1})}], [{label: "requests"}], 260);
    loadOpts.scales.y = {range: (u, min, max) => [0, Math.max(1, max) * 1.15]};  // room for the ticks above
    loadOpts.hooks.draw.push(tickMarks);
    const first = place(loadOpts, d.inflight);
    first.over.addEventListener("mousemove", e => {
      const at = first.posToVal(e.offsetX, "x");
      let lo = 0, hi = ends.length;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (ends[mid] < at) lo = mid + 1; else hi = mid; }
      const near = [lo - 1, lo].filter(i => i >= 0 && i < ends.length)
        .sort((a, b) => Math.abs(ends[a] - at) - Math.abs(ends[b] - at))[0];
      if (near === undefined || Math.abs(first.valToPos(ends[near], "x") - e.offsetX) > 6) return;
      hover.textContent = said(d.requests[near]);
    });
    const [polled, took, ok] = d.health;
    const unhealthy = u => {  // red from each poll that was not 200 until the next poll
      const ctx = u.ctx;
      clipped(u); ctx.fillStyle = "rgba(198, 40, 40, 0.25)";
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
    pressure(d, opts, place);
    if (d.memory[0].length) {
      place(opts("the engine's memory (MiB)",
        [{label: "resident", stroke: "#00695c"}, {label: "anonymous", stroke: "#5d4037"},
         {label: "swap", stroke: "#c62828"}], [{label: "MiB"}], 160), d.memory);
    }
    if (d.windows.length) {  // a long run: each window's TTFT and failures, as steps over its stretch
      const at = d.windows.flatMap(w => [w[0], w[1]]);
      const each = k => d.windows.flatMap(w => [w[k], w[k]]);
      place(opts("window by window: TTFT p50 and p95 (ms), failed %",
        [{label: "TTFT p50", stroke: "#1565c0", scale: "ms"}, {label: "TTFT p95", stroke: "#6a1b9a", scale: "ms"},
         {label: "failed %", stroke: "#c62828", scale: "%"}],
        [{label: "ms", scale: "ms"}, {label: "failed %", scale: "%", side: 1}], 180), [at, each(2), each(3), each(4)]);
    }
    if (d.endpoints.length || d.replicas > 1) endpoints(d, opts, place);
    lanes(d, hover, opts, place);
  }

  // The engine's KV usage and requests waiting, as its /metrics said them. A figure it did not publish is said to be
  // so (llama.cpp publishes no KV usage): an empty panel read as a cache that stayed empty.
  function pressure(d, opts, place) {
    const published = [d.kv[0].length > 0, d.waiting[0].length > 0], none = !published.some(p => p);
    const missing = (label, p) => p ? label : label + " (not published)";
    const o = opts(none ? "the engine's KV usage and requests waiting: not published"
                        : "the engine's " + missing("KV usage", published[0]) + " and " +
                          missing("requests waiting", published[1]),
      [{label: missing("KV usage %", published[0]), stroke: "#6a1b9a", scale: "%",
        paths: uPlot.paths.stepped({align: 1})},
       {label: missing("waiting", published[1]), stroke: "#ef6c00", scale: "n", paths: uPlot.paths.stepped({align: 1})}],
      [{label: "KV %", scale: "%"}, {label: "waiting", scale: "n", side: 1}], none ? 120 : 180);
    o.scales["%"] = published[0] ? {} : {range: [0, 100]};  // the axes drawn all the same: the time axis lines up
    o.scales.n = published[1] ? {} : {range: [0, 1]};
    if (none) {
      o.hooks.draw.push(u => {
        const ctx = u.ctx, {left, top, width, height} = u.bbox;
        const said = "not published: the engine's metrics held no KV usage and no count of requests waiting";
        ctx.save(); ctx.font = 13 * devicePixelRatio + "px sans-serif";
        const wide = ctx.measureText(said).width + 16 * devicePixelRatio, high = 22 * devicePixelRatio;
        ctx.fillStyle = "#fff";
        ctx.fillRect(left + (width - wide) / 2, top + (height - high) / 2, wide, high);
        ctx.fillStyle = "#555"; ctx.textAlign = "center"; ctx.textBaseline = "middle";
        ctx.fillText(said, left + width / 2, top + height / 2);
        ctx.restore();
      });
    }
    place(o, uPlot.join([d.kv, d.waiting]));
  }

  // The replicas (the target first) and watched endpoints: a row each, a strip green where its /health answered 200
  // and red where not, and above it a replica's requests as they ended, coloured by outcome.
  function endpoints(d, opts, place) {
    const shown = (d.replicas > 1 ? [["target", d.health[0], d.health[2]]] : []).concat(d.endpoints);
    const replicaOf = name => name === "target" ? 0 : /^replica-(\d+)$/.test(name) ? Number(name.slice(8)) : null;
    const ends = new Map();
    d.requests.forEach(r => { if (!ends.has(r[7])) ends.set(r[7], []); ends.get(r[7]).push(r); });
    const rows = shown.length;
    const draw = u => {
      const ctx = u.ctx, h = Math.max(3, u.bbox.height / rows * 0.6), strip = h / 3;
      clipped(u);
      shown.forEach(([name, polled, ok], row) => {
        const y = u.valToPos(rows - 1 - row, "y", true) - h / 2;
        polled.forEach((t, i) => {
          const a = u.valToPos(t, "x", true), b = u.valToPos(polled[i + 1] ?? d.duration, "x", true);
          ctx.fillStyle = ok[i] ? "#2e7d32" : "#c62828";
          ctx.fillRect(a, y + h - strip, Math.max(b - a, 1), strip);
        });
        (ends.get(replicaOf(name)) || []).forEach(r => {
          ctx.fillStyle = colour(r[5]);
          ctx.fillRect(u.valToPos(r[0], "x", true) - devicePixelRatio, y, 2 * devicePixelRatio, h - strip - 1);
        });
        ctx.fillStyle = "#212121"; ctx.font = 11 * devicePixelRatio + "px sans-serif";
        ctx.textAlign = "left";
        ctx.fillText(name, u.bbox.left + 4, y + 11 * devicePixelRatio);
      });
      u.ctx.restore();
    };
    const o = opts("replicas and watched endpoints: requests as they ended, over /health (green 200, red not)",
      [{label: "endpoint", show: false}], [{label: "endpoint", values: () => []}], 60 + rows * 48);
    o.scales.y = {range: () => [-0.5, rows - 0.5]};
    o.hooks.draw.push(draw);
    place(o, [[0, d.duration], [0, 0]]).rows = shown.map(s => s[0]);  // its rows' names (for a test to read)
  }

  // Conversation lanes: each request a bar from sent to end on its conversation's row, the first conversation at
  // the top; an agent's subagents on the rows below it, each agent tree on a band of its own.
  function lanes(d, hover, opts, place) {
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
      const ctx = u.ctx, {min, max} = u.scales.x, {left, width, height} = u.bbox;
      const h = Math.max(1, Math.min(8 * devicePixelRatio, height / rows * 0.7));
      clipped(u);
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
      [{label: "conversation", values: () => []}], Math.min(420, Math.max(160, rows * 10 + 40)));  // 160: its axis's word fits
    laneOpts.scales.y = {range: () => [-0.5, rows - 0.5]};
    laneOpts.hooks.draw.push(bars);
    const u = place(laneOpts, [[0, d.duration], [0, 0]]);
    u.laneOf = c => y(rowOf.get(c));  // where a conversation's row is on the y scale (for a test to point at)
    u.over.addEventListener("mousemove", e => {
      const at = u.posToVal(e.offsetX, "x"), row = rows - 1 - Math.round(u.posToVal(e.offsetY, "y"));
      const r = (byRow[row] || []).find(r => r[1] <= at && at <= r[0]);
      if (!r) return;
      hover.textContent = said(r, treeOf.has(r[3]) ? "; agent tree " + (treeOf.get(r[3]) + 1) + " of " +
                                                     bands.length : "");
    });
  }

  // Latency by percentile: each percentile's TTFT and end-to-end time (ms, a log scale), a line a run.
  function latency(key) {
    const d = read(key + "-latency-data"), box = document.getElementById(key + "-latency");
    const palette = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a"];
    ["ttft", "e2e"].forEach((name, k) => {
      const series = d.runs.map((run, i) => ({label: run.label, stroke: palette[i % palette.length], width: 1.5}));
      const title = (name === "ttft" ? "time to first token" : "end to end") + " (ms) by percentile";
      const u = new uPlot({title, width: Math.min(540, widthOf(box)), height: 240, series: [{label: "percentile"},
        ...series], scales: {x: {time: false}, y: {distr: 3}}, axes: [{label: "percentile"}, {label: "ms", size: 60}]},
        [d.percentiles, ...d.runs.map(run => run[name])], box);
      (window.loadreproLatency = window.loadreproLatency || []).push(u);
    });
  }

  // A sweep's curves against the load: each engine a line; a cross where it failed.
  function sweep(key) {
    const d = read(key + "-data"), box = document.getElementById(key + "-charts");
    const palette = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a"];
    d.figures.forEach(([name, title]) => {
      const series = d.curves.map((c, i) => ({label: c.label, stroke: palette[i % palette.length], width: 1.5,
                                              spanGaps: true, points: {show: true, size: 5}}));
      const failed = u => {
        const ctx = u.ctx;
        ctx.save(); ctx.lineWidth = 2;
        d.curves.forEach((c, i) => c.failed.forEach((bad, j) => {
          if (!bad || c[name][j] === null) return;
          const x = u.valToPos(c.x[j], "x", true), y = u.valToPos(c[name][j], "y", true), s = 6;
          ctx.strokeStyle = palette[i % palette.length];
          ctx.beginPath(); ctx.moveTo(x - s, y - s); ctx.lineTo(x + s, y + s); ctx.moveTo(x + s, y - s);
          ctx.lineTo(x - s, y + s); ctx.stroke();
        }));
        ctx.restore();
      };
      const u = new uPlot({title, width: Math.min(540, widthOf(box)), height: 240, series: [{label: d.over},
        ...series], scales: {x: {time: false, distr: 3, log: 2}}, axes: [{label: d.over}, {size: 60}],
        hooks: {draw: [failed]}},
        uPlot.join(d.curves.map(c => [c.x, c[name]])), box);
      (window.loadreproSweep = window.loadreproSweep || []).push(u);
    });
  }

  // A stress battery's phases in order: TTFT p50 and p95 of each, a cross on a phase that failed.
  function stress(key) {
    const d = read(key + "-data"), box = document.getElementById(key + "-charts");
    const x = d.names.map((_, i) => i);
    const failed = u => {
      const ctx = u.ctx;
      ctx.save(); ctx.lineWidth = 2; ctx.strokeStyle = "#c62828";
      d.failed.forEach((bad, i) => {
        const v = d.ttft95[i] === null ? d.ttft50[i] : d.ttft95[i];
        if (!bad || v === null) return;
        const px = u.valToPos(i, "x", true), py = u.valToPos(v, "y", true), s = 6;
        ctx.beginPath(); ctx.moveTo(px - s, py - s); ctx.lineTo(px + s, py + s); ctx.moveTo(px + s, py - s);
        ctx.lineTo(px - s, py + s); ctx.stroke();
      });
      ctx.restore();
    };
    const u = new uPlot({title: "TTFT by phase (ms)", width: widthOf(box), height: 260,
      series: [{label: "phase", value: (_, i) => d.names[i] || ""},
               {label: "TTFT p50", stroke: "#1565c0", width: 0, points: {show: true, size: 7}},
               {label: "TTFT p95", stroke: "#6a1b9a", width: 0, points: {show: true, size: 7}}],
      scales: {x: {time: false}, y: {distr: 3}},
      axes: [{values: (_, ticks) => ticks.map(i => d.names[i] || ""), incrs: [1]}, {size: 60}],
      hooks: {draw: [failed]}}, [x, d.ttft50, d.ttft95], box);
    (window.loadreproStress = window.loadreproStress || []).push(u);
  }

  document.querySelectorAll("[data-loadrepro-chart]").forEach(el => {
    const [kind, key] = el.dataset.loadreproChart.split(":");
    ({timeline, latency, sweep, stress})[kind](key);
  });
})();
