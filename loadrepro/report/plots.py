"""The report's pictures, drawn with matplotlib (Agg; no display, no network) as PNG, for the Markdown and, inline,
the HTML page. Each picture is one figure, drawn once."""

from __future__ import annotations

import io
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure, SubFigure

from loadrepro.judge.windows import REFERENCE_WINDOW
from loadrepro.records import replica_name
from loadrepro.report.timeline import Lane, Timeline
from loadrepro.schema.sweep_report import SweepCurve

COLOURS = {"ok": "#2e7d32", "rejected": "#607d8b", "throttled": "#ef6c00", "server_error": "#c62828",
           "stream_error": "#ad1457", "truncated": "#6a1b9a", "protocol_error": "#795548", "stalled": "#d81b60",
           "timeout": "#827717", "unreachable": "#212121", "cancelled": "#bdbdbd",
           "faulted": "#9575cd"}
CHAOS = "#5e35b1"
MAX_LANES = 200
matplotlib.rcParams.update({"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9})


def _figure(**kwargs: Any) -> Figure:
    """A figure drawn by Agg without pyplot: no display, no global registry of figures (and pyplot's import, a
    fifth of matplotlib's, is not paid)."""
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def _margins(fig: Figure | SubFigure, rows: int, top: float, bottom: float = 0.5, left: float = 0.8,
             right: float = 0.7, gap: float = 0.0) -> None:
    """Margins and the gap between `rows` panels, in inches, fixed. Constrained layout placed the same titles,
    legends and labels, but cost 0.2-0.4 s a picture (half of drawing it), paid by every run, trial and sweep level."""
    width, height = fig.get_size_inches() if isinstance(fig, Figure) else _subfigure_inches(fig)
    panel = (height - top - bottom - gap * (rows - 1)) / rows
    fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height, bottom=bottom / height,
                        hspace=gap / panel, wspace=0.25)


def _subfigure_inches(fig: SubFigure) -> tuple[float, float]:
    width, height = fig.figure.get_size_inches()
    box = fig.bbox_relative
    return width * box.width, height * box.height


def _marks(ax: Axes, t: Timeline) -> None:
    if t.first_failure_s is not None:
        ax.axvline(t.first_failure_s, color="#c62828", linestyle="--", linewidth=1.2)
    if t.first_fatal_s is not None:
        ax.axvline(t.first_fatal_s, color="black", linestyle=":", linewidth=1.2)
    if t.first_wrong_s is not None:
        ax.axvline(t.first_wrong_s, color="#e65100", linestyle="-.", linewidth=1.2)
    for at_s, back_s, _ in t.chaos:  # each fault on purpose, its recovery shaded
        ax.axvline(at_s, color=CHAOS, linestyle=(0, (1, 1)), linewidth=1.4)
        ax.axvspan(at_s, back_s, color=CHAOS, alpha=0.1, linewidth=0)


MAX_MARKS = 1500  # end ticks drawn per outcome: more cannot be told apart, and each one is bytes in the SVG
MAX_BARS = 3000  # lanes drawn at most; a soak has hundreds of thousands of turns, and requests.jsonl has them all


def _thin(values: np.ndarray, most: int) -> np.ndarray:
    """At most `most` of `values`, evenly spread (all of them when there are few)."""
    if len(values) <= most:
        return values
    thinned: np.ndarray = values[np.linspace(0, len(values) - 1, most).astype(int)]
    return thinned


def _load_panel(ax: Axes, t: Timeline) -> None:
    ax.step(t.in_flight_t, t.in_flight_n, where="post", color="#1565c0", linewidth=1.4, label="in flight")
    top = max(1, int(t.in_flight_n.max()) if len(t.in_flight_n) else 1)
    for outcome, ends in t.ends.items():
        shown = _thin(np.sort(ends), MAX_MARKS)
        ax.plot(shown, np.full(len(shown), top * 1.08), "|", markersize=10, color=COLOURS.get(outcome, "gray"),
                label=f"{outcome} ({t.end_counts.get(outcome, len(ends)):,})")
    ax.set_ylim(0, top * 1.2)
    ax.set_ylabel("requests")
    # Above the panel, between its title and the tick band, so that it covers none of the ticks.
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=6, frameon=False, borderaxespad=0.2)


def _canaries(ax: Axes, t: Timeline, top: float) -> None:
    answered = ~np.isnan(t.canary_ttft_s)
    ax.plot(t.canary_t[answered], t.canary_ttft_s[answered], color="#ef6c00", linewidth=1.0, marker="o",
            markersize=3, label="canary's first token (s)")
    if (~answered).any():
        ax.plot(t.canary_t[~answered], np.full((~answered).sum(), top * 0.5), "x", color="#c62828", markersize=7,
                label="canary got nothing")


HEALTHY, UNHEALTHY = "#66bb6a", "#ef5350"  # /health answered 200, or did not


def _stretches(times: np.ndarray, ok: np.ndarray, duration_s: float) -> list[tuple[float, float, bool]]:
    """Polls as stretches of one answer (start, end, 200 or not): one span per stretch, not per poll."""
    if not len(times):
        return []
    edges = np.append(times, max(duration_s, float(times[-1])))
    starts = [i for i in range(len(ok)) if i == 0 or ok[i] != ok[i - 1]]
    return [(float(edges[i]), float(edges[j]), bool(ok[i])) for i, j in zip(starts, starts[1:] + [len(ok)])]


def _health_panel(ax: Axes, t: Timeline) -> None:
    """/health's answers as coloured stretches, how long each poll took as a line over them, and the canaries'
    time to their token."""
    latencies = np.concatenate([t.health_latency_s, t.canary_ttft_s[~np.isnan(t.canary_ttft_s)]])
    top = max(0.05, float(latencies.max()) * 1.1) if len(latencies) else 1.0
    if len(t.health_t):
        for start, end, ok in _stretches(t.health_t, t.health_ok, t.duration_s):
            ax.axvspan(start, end, color=HEALTHY if ok else UNHEALTHY, alpha=0.45, linewidth=0)
        changes = [i for i in range(len(t.health_status)) if i == 0 or t.health_status[i] != t.health_status[i - 1]]
        for i in changes:
            ax.text(max(t.health_t[i], 0.0), top * 1.4, f" {t.health_status[i]}", va="center", fontsize=9,
                    clip_on=True, in_layout=False)  # the pre-run poll comes before time zero
        ax.plot(t.health_t, t.health_latency_s, color="black", linewidth=1.0, marker=".", markersize=3,
                label=f"{t.health_path} answer (s)")
    if len(t.canary_t):
        _canaries(ax, t, top)
    if len(t.health_t) or len(t.canary_t):  # above the lines: the axis reaches higher than they do
        ax.legend(loc="upper right", frameon=False, ncols=3, fontsize=8)
    ax.set_ylim(0, top * 1.8)
    ax.set_ylabel(f"{t.health_path} s")


def _kv_panel(ax: Axes, t: Timeline) -> None:
    """What the engine publishes of KV usage (left axis) and of its waiting and running requests (right axis):
    llama.cpp publishes no KV usage, but it does say what waits and what runs."""
    counts = [(t.waiting_t, t.waiting, "waiting", "#ef6c00"), (t.running_t, t.running, "running", "#1565c0")]
    counts = [c for c in counts if len(c[0])]
    if not len(t.kv_t) and not counts:
        ax.text(0.5, 0.5, "no engine metrics", transform=ax.transAxes, ha="center", va="center", color="gray")
        ax.set_ylabel("KV %")
        return
    if len(t.kv_t):
        ax.step(t.kv_t, t.kv_usage * 100, where="post", color="#6a1b9a", linewidth=1.4, label="KV usage %")
        ax.set_ylim(0, 105)
        ax.legend(loc="upper left", frameon=False)
        ax.set_ylabel("KV %")
    else:
        ax.set_yticks([])
        ax.text(0.01, 0.5, "no KV usage published", transform=ax.transAxes, va="center", color="gray")
    if counts:
        twin = ax.twinx()
        for times, values, name, colour in counts:
            twin.step(times, values, where="post", color=colour, linewidth=1.2, label=name)
        twin.set_ylabel("requests")
        twin.set_ylim(0, max(1.0, max(float(v.max()) for _, v, _, _ in counts) * 1.2))
        twin.legend(loc="upper right", frameon=False, ncols=2)


def _windows_panel(ax: Axes, t: Timeline) -> None:
    """A long run's latency and errors window by window, as soak users read them: TTFT p50 and p95 (left axis)
    and the error rate (right axis) of the requests sent in each window, with the degradation rule's reference
    window shaded."""
    if not t.windows:
        ax.text(0.5, 0.5, "too short for windows", transform=ax.transAxes, ha="center", va="center", color="gray")
        ax.set_yticks([])
        return
    edges = [w.start_s for w in t.windows] + [t.windows[-1].end_s]
    for name, values, colour in (("TTFT p50", [w.ttft_p50_ms for w in t.windows], "#1565c0"),
                                 ("TTFT p95", [w.ttft_p95_ms for w in t.windows], "#6a1b9a")):
        ys = [np.nan if v is None else v for v in values]
        ax.stairs(ys, edges, color=colour, linewidth=1.4, label=f"{name} (ms)", baseline=None)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("TTFT ms")
    if len(t.windows) > REFERENCE_WINDOW:
        ref = t.windows[REFERENCE_WINDOW]
        ax.axvspan(ref.start_s, ref.end_s, color="#fff59d", alpha=0.6, linewidth=0, zorder=0,
                   label="degradation's reference")
    twin = ax.twinx()
    twin.stairs([100 * w.failed / w.requests if w.requests else np.nan for w in t.windows], edges,
                color="#c62828", linewidth=1.2, label="errors %", baseline=None)
    twin.set_ylim(0, 105)
    twin.set_ylabel("errors %")
    ax.legend(loc="upper left", frameon=False, ncols=3, fontsize=8)
    twin.legend(loc="upper right", frameon=False, fontsize=8)


def _endpoints_panel(ax: Axes, t: Timeline) -> None:
    """Each watched endpoint's KV usage (solid) and waiting requests (dashed, right axis), shaded red where its
    /health was not 200."""
    twin = ax.twinx()
    for i, e in enumerate(t.endpoints):
        colour = f"C{i}"
        if len(e.kv_t):
            ax.plot(e.kv_t, e.kv_usage * 100, color=colour, label=f"{e.name} KV %")
        if len(e.waiting_t):
            twin.plot(e.waiting_t, e.waiting, color=colour, linestyle="--", label=f"{e.name} waiting")
        ends = np.r_[e.health_t[1:], t.duration_s] if len(e.health_t) else e.health_t
        for start, end, ok in zip(e.health_t, ends, e.health_ok, strict=True):
            if not ok:  # until the next poll said otherwise
                ax.axvspan(start, max(end, start), color=COLOURS["server_error"], alpha=0.2, linewidth=0)
    ax.set_ylabel("watched KV %")
    ax.set_ylim(0, 105)
    twin.set_ylabel("waiting")
    if ax.get_legend_handles_labels()[0]:  # none when the endpoints publish no metrics
        ax.legend(loc="upper left", frameon=False, fontsize=8)
    if twin.get_legend_handles_labels()[0]:
        twin.legend(loc="upper right", frameon=False, fontsize=8)
    ax.set_title("watched endpoints and replicas: KV usage, waiting; red where /health was not 200", loc="left",
                 fontsize=9)


def _memory_panel(ax: Axes, t: Timeline) -> None:
    """The started engine's process group: resident and anonymous memory (the heap and KV, not the mapped model),
    and swap when any was seen (growth hidden there)."""
    for column, name, colour in ((0, "resident", "#37474f"), (1, "anonymous", "#00897b"), (2, "swap", "#c62828")):
        if len(t.memory_t) and np.nansum(t.memory_mib[:, column]) > 0:  # anon, swap: not in /metrics; swap: seen
            ax.plot(t.memory_t, t.memory_mib[:, column], color=colour, linewidth=1.3, label=f"{name} MiB")
    if len(t.memory_t):
        ax.legend(loc="upper left", frameon=False, ncols=3, fontsize=8)
    else:  # beside a run that has them (compare): an engine loadrepro did not start
        ax.text(0.5, 0.5, "memory not read", transform=ax.transAxes, ha="center", va="center", color="gray")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("engine MiB")


def _replicas_panel(ax: Axes, t: Timeline) -> None:
    """One lane per replica: its /health as stretches (green 200, red not), and the end of each of its requests
    kept in memory as a tick coloured by outcome."""
    health = {e.name: (e.health_t, e.health_ok) for e in t.endpoints}
    health[replica_name(0)] = (t.health_t, t.health_ok)
    for i in range(t.replicas):
        times, ok = health.get(replica_name(i), (np.array([]), np.array([])))
        spans = _stretches(times, ok, t.duration_s)
        ax.broken_barh([(a, b - a) for a, b, _ in spans], (i - 0.4, 0.8), alpha=0.3, linewidth=0,
                       facecolors=[HEALTHY if good else UNHEALTHY for _, _, good in spans])
        by_outcome: dict[str, list[float]] = {}
        for lane in t.lanes:
            if lane.replica == i:
                by_outcome.setdefault(lane.outcome, []).append(lane.end_s)
        for outcome, ends in sorted(by_outcome.items()):
            shown = _thin(np.sort(ends), MAX_MARKS)
            ax.plot(shown, np.full(len(shown), i), "|", markersize=8, color=COLOURS.get(outcome, "gray"))
    ax.set_yticks(range(t.replicas), [replica_name(i) for i in range(t.replicas)])
    ax.set_ylim(t.replicas - 0.5, -0.5)
    ax.set_title("replicas: each one's requests as they ended (coloured by outcome) over its /health (green 200, "
                 "red not)", loc="left", fontsize=9)


def timeline_figure(timelines: list[Timeline]) -> Figure:
    """Requests in flight with completions and failures, /health, KV usage and waiting, and for a long run its
    latency and errors window by window: one shared time axis for every run given (so stock and patched line up).
    Dashed red: first failure; dotted black: first fatal log line; dash-dotted orange: the first wrong answer (when
    it ended under load); densely dotted purple: a fault on purpose, shaded until the engine recovered; thin grey:
    the edges of a long run's windows. With replicas, a lane each: its requests' ends over its /health. With an engine
    loadrepro started, its memory."""
    windowed = any(t.windows for t in timelines)
    watched = any(t.endpoints for t in timelines)
    replicas = max(t.replicas for t in timelines)
    memory = any(len(t.memory_t) for t in timelines)
    ratios = ([3, 1.2, 2] + ([2] if windowed else []) + ([2] if watched else []) + ([1.5] if memory else [])
              + ([0.8 + 0.3 * replicas] if replicas > 1 else []))
    fig = _figure(figsize=(11, 2.1 * len(timelines) * len(ratios)))
    # One subfigure a run: its title and legend above its first panel, its own margins; one time axis for all.
    parts: list[Figure | SubFigure] = [fig]
    if len(timelines) > 1:
        parts = list(fig.subfigures(len(timelines), 1, squeeze=False)[:, 0])
    axes: list[Axes] = []
    for part in parts:
        grid = part.add_gridspec(len(ratios), 1, height_ratios=ratios)
        for row in range(len(ratios)):
            axes.append(part.add_subplot(grid[row], sharex=axes[0] if axes else None))
            axes[-1].tick_params(labelbottom=row == len(ratios) - 1)
        _margins(part, len(ratios), top=0.75, bottom=0.55, gap=0.4 if watched else 0.12)
    for i, t in enumerate(timelines):
        panels = axes[len(ratios) * i:len(ratios) * (i + 1)]
        load, health, kv = panels[:3]
        _load_panel(load, t)
        load.set_title(f"{t.label}: requests in flight and when each ended", loc="left", pad=24)
        _health_panel(health, t)
        _kv_panel(kv, t)
        if windowed:
            _windows_panel(panels[3], t)
        if watched:
            _endpoints_panel(panels[3 + windowed], t)
        if memory:
            _memory_panel(panels[3 + windowed + watched], t)
        if replicas > 1:
            _replicas_panel(panels[-1], t)
        for ax in panels:
            _marks(ax, t)
            for w in t.windows[1:]:
                ax.axvline(w.start_s, color="0.75", linewidth=0.6, zorder=0)
    axes[-1].set_xlim(0, max(t.duration_s for t in timelines) * 1.02)
    axes[-1].set_xlabel("seconds since the load started")
    return fig


def lanes_figure(t: Timeline) -> Figure:
    """One lane per conversation, one bar per turn from sent to end, coloured by outcome."""
    lanes = [lane for lane in t.lanes if lane.conversation < MAX_LANES]
    if len(lanes) > MAX_BARS:
        fig = _figure(figsize=(11, 1.2))
        ax = fig.subplots()
        ax.axis("off")
        ax.text(0, 0.5, f"{t.label}: {len(t.lanes):,} turns, too many lanes to draw; requests.jsonl has every one",
                va="center")
        return fig
    count = max((lane.conversation for lane in lanes), default=0) + 1
    fig = _figure(figsize=(11, min(8.0, 1.0 + 0.22 * count)))
    ax = fig.subplots()
    _margins(fig, 1, top=0.6, right=0.2)
    by_outcome: dict[str, list[Lane]] = {}
    for lane in lanes:
        by_outcome.setdefault(lane.outcome, []).append(lane)
    for outcome, group in sorted(by_outcome.items()):
        ax.hlines([g.conversation for g in group], [g.start_s for g in group], [g.end_s for g in group],
                  colors=COLOURS.get(outcome, "gray"), linewidth=max(1.5, min(8.0, 160 / count)), label=outcome)
    ax.set_ylim(count - 0.5, -0.5)
    ax.set_ylabel("conversation")
    ax.set_xlabel("seconds since the load started")
    shown = "" if len(lanes) == len(t.lanes) else f" (first {MAX_LANES} conversations)"
    ax.set_title(f"{t.label}: each turn from sent to end{shown}", loc="left")
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=6, frameon=False)
    _marks(ax, t)
    return fig


def latency_figure(t: Timeline) -> Figure:
    fig = _figure(figsize=(11, 3.2))
    left, right = fig.subplots(1, 2)
    _margins(fig, 1, top=0.35, right=0.2)
    for ax, values, weight, name in ((left, t.ttft_ms, t.ttft_weight, "time to first token"),
                                     (right, t.e2e_ms, t.e2e_weight, "end to end")):
        requests = round(len(values) * weight)
        if len(values):
            ax.hist(values, bins=min(50, max(5, requests // 4)), weights=np.full(len(values), weight),
                    color="#1565c0", histtype="stepfilled")  # one polygon: fifty bars cost 0.1 s to make
        kept = " (drawn from the run's sketches: not every record was kept in memory)" if t.dropped else ""
        ax.set_title(f"{t.label}: {name} (ms), {requests:,} requests{kept}", loc="left")
        ax.set_xlabel("ms")
    left.set_ylabel("requests")
    return fig


SIDE_COLOURS = {"stock": "#c62828", "patched": "#2e7d32"}


def sweep_figure(curves: list[SweepCurve], over: str) -> Figure:
    """A sweep's curves against the load: output tokens/s; TTFT p50 (solid) and p95 (dashed); ITL p50; goodput
    (requests/s that met the SLO), or TTFT p95 against output tokens/s without an SLO. A cross marks a level where
    the engine failed (a rule other than slo); a dashed vertical line each engine's first failure."""
    fig = _figure(figsize=(11, 6.4), layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    slo = any(lv.slo is not None for c in curves for lv in c.levels)
    unit = "requests in flight" if over == "concurrency" else "arrivals per second"
    for c in curves:
        colour = SIDE_COLOURS.get(c.label, "#1565c0")
        x = [lv.value for lv in c.levels]
        failed = [lv.broke for lv in c.levels]
        series: list[tuple[Axes, list[float | None], str]] = [
                  (axes[0], [lv.throughput.output_tokens_per_s for lv in c.levels], "-"),
                  (axes[1], [lv.latency.ttft_ms.p50 for lv in c.levels], "-"),
                  (axes[1], [lv.latency.ttft_ms.p95 for lv in c.levels], "--"),
                  (axes[2], [lv.latency.itl_ms.p50 for lv in c.levels], "-")]
        if slo:
            series.append((axes[3], [lv.slo.goodput_requests_per_s if lv.slo else None for lv in c.levels], "-"))
        for ax, ys, style in series:
            points = [(a, b, f) for a, b, f in zip(x, ys, failed, strict=True) if b is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", color=colour,
                    label=c.label if style == "-" else f"{c.label} p95")
            ax.plot([p[0] for p in points if p[2]], [p[1] for p in points if p[2]], "x", color="black",
                    markersize=9)
        if not slo:
            axes[3].plot([lv.throughput.output_tokens_per_s for lv in c.levels],
                         [lv.latency.ttft_ms.p95 for lv in c.levels], marker="o", color=colour, label=c.label)
        if c.break_ is not None:
            for ax in axes[:3 if not slo else 4]:
                ax.axvline(c.break_.first_fail, color=colour, linestyle="--", linewidth=1)
    titles = ["output tokens/s", "TTFT ms (p50 solid, p95 dashed)", "ITL p50 ms",
              "goodput: requests/s that met the SLO" if slo else "TTFT p95 ms against output tokens/s"]
    for i, (ax, title) in enumerate(zip(axes, titles, strict=True)):
        ax.set_title(title, loc="left")
        ax.set_xlabel(unit if i < 3 or slo else "output tokens/s")
        if i < 3 or slo:
            ax.set_xscale("log", base=2)
    axes[0].legend(frameon=False)
    return fig


def png(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG. Nothing else holds a figure made without pyplot, so it goes with its last reference
    (clearing it first, as pyplot's users must, cost a tenth of a second a run)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()
