"""report.html's timeline drawn by the browser: in headless Chromium the page draws its four panels with no console
error, pointing at a request's tick, or at its bar in the conversation lanes, says which request it was and how it
ended (and for an agent's, its tree), in a line read where the pointer is even in a window shorter than the panels;
a zoom of one panel zooms all; the page loads nothing from the network (the chart library is inside it)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from tests.browser import CHROMIUM, opened
from tests.helpers import cli

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt install chromium)")


async def _look(url: str) -> dict:
    async with opened(url) as page:
        seen = {"charts": await page.evaluate("window.loadreproCharts.length"),
                "canvases": await page.evaluate("document.querySelectorAll('#timeline-charts canvas').length")}
        # zoomed into the first failing request's end (a drag does this), each panel alike; then its tick pointed at
        pointed = await page.evaluate("""(() => {
            const d = JSON.parse(document.getElementById('timeline-data').textContent);
            const r = d.requests.find(r => r[5] !== 'ok');
            window.loadreproCharts[0].setScale('x', {min: r[0] - 0.005, max: r[0] + 0.005});
            return [r[2], r[0]];
        })()""")
        seen["pointed"], end = pointed
        seen["zoomed"] = await page.evaluate("window.loadreproCharts.map(u => [u.scales.x.min, u.scales.x.max])")
        # a laptop's window, shorter than the panels: the line the hover fills is read without scrolling to it
        await page.call("Emulation.setDeviceMetricsOverride", width=1200, height=800, deviceScaleFactor=1, mobile=False)
        await page.evaluate("window.scrollTo(0, 0)")
        where = await page.evaluate(f"""(() => {{
            const u = window.loadreproCharts[0], box = u.over.getBoundingClientRect();
            return [box.left + u.valToPos({end}, 'x'), box.top + 6];  // on its tick, along the top
        }})()""")
        await page.point_at(where[0], where[1])
        seen["where"] = where
        seen["hover"] = await page.evaluate("document.getElementById('timeline-hover').textContent")
        seen["hover_in_view"] = await page.evaluate("""(() => {
            const b = document.getElementById('timeline-hover').getBoundingClientRect();
            return b.top >= 0 && b.bottom <= innerHeight;
        })()""")
        seen["end"] = end
        seen["errors"] = list(page.errors)
    return seen


def test_the_timeline_draws_in_the_browser_and_says_which_request_a_tick_is(tmp_path, pictures):
    done = cli("run", "--profile", "draft-pool", "--out", str(tmp_path), "--quiet")
    assert done.returncode == 1, done.stderr  # the stock draft pool dies: failing ticks to point at
    page = (tmp_path / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?https?://""", page)  # nothing fetched: it opens offline
    seen = asyncio.run(_look((tmp_path / "report.html").as_uri()))
    assert seen["errors"] == [] and seen["charts"] == 4 and seen["canvases"] >= 4, seen
    report = json.loads((tmp_path / "report.json").read_text())
    failed = {r["id"]: r for r in report["request_table"] if r["outcome"] != "ok"}
    hovered = seen["hover"]
    assert hovered.startswith(f"request {seen['pointed']} (") and failed[seen["pointed"]]["outcome"] in hovered, seen
    assert seen["hover_in_view"] and seen["where"][1] < 800, seen  # pointed inside the window, and read there
    assert all(scale == [seen["end"] - 0.005, seen["end"] + 0.005] for scale in seen["zoomed"]), seen["zoomed"]


async def _lane(url: str) -> dict:
    """Point at the middle of the bar of a subagent's request in the lanes panel."""
    async with opened(url) as page:
        where = await page.evaluate("""(() => {
            const d = JSON.parse(document.getElementById('timeline-data').textContent);
            const u = window.loadreproCharts[3], sub = d.trees[0][1];
            const r = d.requests.find(r => r[3] === sub);
            u.over.scrollIntoView();
            const box = u.over.getBoundingClientRect();
            return [box.left + u.valToPos((r[0] + r[1]) / 2, 'x'), box.top + u.valToPos(u.laneOf(sub), 'y'), r[2],
                    d.trees.length];
        })()""")
        await page.point_at(where[0], where[1])
        return {"hover": await page.evaluate("document.getElementById('timeline-hover').textContent"),
                "request": where[2], "trees": where[3], "errors": list(page.errors)}


def test_the_lanes_draw_each_agent_tree_and_name_a_subagents_request(tmp_path, pictures):
    from tests.helpers import SMALL
    from tests.trace_server import TraceServer

    with TraceServer(answer_s=0.05).running() as url:
        done = cli("run", "--profile", "agents-draft-pool", *(f for s in SMALL for f in ("--set", s)),
                   "--base-url", url, "--out", str(tmp_path), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    seen = asyncio.run(_lane((tmp_path / "report.html").as_uri()))
    trees = json.loads((tmp_path / "report.json").read_text())["agents"]["trees"]
    assert seen["errors"] == [] and seen["trees"] == trees > 1, seen
    assert seen["hover"].startswith(f"request {seen['request']} (") and f"agent tree 1 of {trees}" in seen["hover"]


async def _charts(url: str, zoom: bool) -> dict:
    async with opened(url) as page:
        seen = {"time": await page.evaluate("window.loadreproCharts.length"),
                "sweep": await page.evaluate("(window.loadreproSweep || []).length"),
                "latency": await page.evaluate("(window.loadreproLatency || []).length")}
        if zoom:
            await page.evaluate("window.loadreproCharts[0].setScale('x', {min: 0.05, max: 0.1})")
            seen["zoomed"] = await page.evaluate("window.loadreproCharts.map(u => [u.scales.x.min, u.scales.x.max])")
        seen["errors"] = list(page.errors)
    return seen


def test_compare_html_draws_both_runs_on_one_zoom_and_their_latency(tmp_path, pictures):
    done = cli("ab", "--profile", "quickstart", "--out", str(tmp_path), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    page = (tmp_path / "compare.html").read_text()
    assert page.count("data-loadrepro-chart=timeline:") == 2 and "<img" not in page
    seen = asyncio.run(_charts((tmp_path / "compare.html").as_uri(), zoom=True))
    assert seen["errors"] == [] and seen["time"] >= 8 and seen["latency"] == 2, seen
    assert all(scale == [0.05, 0.1] for scale in seen["zoomed"]), seen["zoomed"]  # the other run's panels too


@pytest.mark.slow
def test_sweep_html_draws_its_curves_with_the_failed_levels(tmp_path, pictures):
    done = cli("sweep", "--profile", "quickstart", "--values", "1,12", "--out", str(tmp_path), "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr  # the stock engine fails: its levels are crossed
    seen = asyncio.run(_charts((tmp_path / "sweep.html").as_uri(), zoom=False))
    assert seen["errors"] == [] and seen["sweep"] == 4 and seen["time"] == 0, seen
    assert not (tmp_path / "sweep.png").exists()


def test_a_long_runs_windows_and_its_replicas_health_are_panels_of_their_own(tmp_path):
    """A timeline with windows and a replica beside the target (built here, as a soak over replicas would leave it):
    two more panels, drawn with no error, the replicas' with a row for the target and one for the replica. Its
    engine published a waiting count and no KV usage, as llama.cpp does: the KV panel's title says which is missing;
    its one conversation's lane panel, the shortest there is, has room for its axis's word."""
    import numpy as np

    from loadrepro.report.html import html_page
    from loadrepro.report.interactive import page_scripts, timeline_section
    from loadrepro.report.timeline import EndpointSeries, Lane, Timeline
    from loadrepro.schema.long_run_sections import WindowRow

    at, empty = np.linspace(0, 4, 9), np.array([])
    window = {"requests": 10, "outcomes": {"ok": 9, "stream_error": 1}, "failed": 1, "ttft_p50_ms": 5.0,
              "ttft_p95_ms": 9.0, "ttft_p95_bounds_ms": None, "itl_p50_ms": 1.0, "itl_p95_ms": 2.0,
              "kv_usage_max": None, "kv_usage_quiet": None, "waiting_max": None, "preemptions": None}
    timeline = Timeline(
        label="soak", duration_s=4.0, in_flight_t=at, in_flight_n=np.ones(9), ends={}, end_counts={}, health_t=at,
        health_ok=np.ones(9, dtype=int), health_status=("200",) * 9, health_latency_s=np.full(9, 0.01),
        canary_t=empty, canary_ttft_s=empty, kv_t=empty, kv_usage=empty, waiting_t=at, waiting=np.zeros(9),
        running_t=empty, running=empty, lanes=(Lane(0, 1, 0.5, 1.0, "ok", 0, 1),), ttft_ms=np.array([5.0]),
        e2e_ms=np.array([9.0]), first_failure_s=None, first_fatal_s=None, first_fatal_text="",
        windows=tuple(WindowRow(index=i + 1, start_s=2.0 * i, end_s=2.0 * (i + 1), **window) for i in range(2)),
        endpoints=(EndpointSeries("replica-1", at, np.array([1, 1, 1, 1, 0, 0, 0, 0, 0]), empty, empty, empty,
                                  empty),), replicas=2)
    page = tmp_path / "timeline.html"
    page.write_text(html_page("timeline", timeline_section(timeline) + page_scripts()))

    async def look() -> dict:
        async with opened(page.as_uri()) as tab:
            titles = await tab.evaluate("window.loadreproCharts.map(u => u.root.querySelector('.u-title').textContent)")
            rows = await tab.evaluate("window.loadreproCharts[4].rows")
            # the lanes' axis word, drawn upright beside the plot's middle: whole when the canvas is that long there
            word = await tab.evaluate("""(() => {
                const u = window.loadreproCharts[5], axis = u.axes[1];
                u.ctx.font = axis.labelFont[0];
                return [axis.label, u.ctx.measureText(axis.label).width, 2 * (u.bbox.top + u.bbox.height / 2)];
            })()""")
            return {"titles": titles, "rows": rows, "word": word, "errors": list(tab.errors)}

    seen = asyncio.run(look())
    assert seen["errors"] == [] and len(seen["titles"]) == 6, seen
    assert seen["titles"][3].startswith("window by window") and seen["titles"][4].startswith("replicas and watched")
    assert seen["rows"] == ["target", "replica-1"]  # the target's own row first: the load went to both
    assert seen["titles"][2] == "the engine's KV usage (not published) and requests waiting"  # as llama.cpp's
    label, wide, room = seen["word"]
    assert label == "conversation" and wide <= room, seen["word"]  # one conversation: the least room


async def _hostile(url: str) -> dict:
    async with opened(url) as page:
        drawn = {"charts": await page.evaluate("(window.loadreproCharts || []).length"),
                 "canvases": await page.evaluate("document.querySelectorAll('canvas').length")}
        if drawn["charts"] < 4:
            return {**drawn, "errors": list(page.errors)}
        return {
            **drawn,
            "titles": await page.evaluate(
                "window.loadreproCharts.map(u => u.root.querySelector('.u-title').textContent)"),
            "h1": await page.evaluate("document.querySelector('h1').textContent"),
            "details": await page.evaluate(
                "JSON.parse(document.getElementById('timeline-data').textContent).requests.map(r => r[6])"),
            "first_failure": await page.evaluate("document.querySelector('pre').textContent"),
            "notes": await page.evaluate("[...document.querySelectorAll('h2 + ul li')].map(li => li.textContent)"),
            "scripts": await page.evaluate("[...document.scripts].map(s => s.id || s.type || 'code')"),
            "errors": list(page.errors)}


def test_an_engines_hostile_texts_are_shown_as_they_are_and_every_chart_is_drawn(tmp_path, pictures):
    """Error texts, a model name and a label that bend HTML parsing where a page embeds them as they came (inside
    the JSON a chart is drawn from, `<!--<script>` swallowed the rest of the page: no chart at all): each chart drawn,
    each text shown as it is; an engine that publishes no KV figures gets a panel that says so."""
    from tests.helpers import small
    from tests.hostile_server import HOSTILE, HostileServer

    label = "<!--<script>label\u2028</script>"
    with HostileServer().running() as server:
        done = cli("run", "--profile", "quickstart", *small("workload.conversations=12", "workload.turns=1"),
                   "--base-url", server.url, "--label", label, "--out", str(tmp_path), "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr  # 8 of its 12 requests failed
    report = json.loads((tmp_path / "report.json").read_text())
    requests = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().split("\n") if line]
    # each text went in: as it is in an error event, as a JSON string in a 500's body
    said = [json.dumps(text, ensure_ascii=False)[1:-1] for text in HOSTILE]
    assert all(any(text in (r["detail"] or "") for r in requests) for text in said), [r["detail"] for r in requests]
    seen = asyncio.run(_hostile((tmp_path / "report.html").as_uri()))
    assert seen["errors"] == [] and seen["charts"] == 4 and seen["canvases"] == 6, seen  # and the 2 of latency
    assert label in seen["h1"] and seen["titles"][0].startswith(label + ": requests in flight"), seen
    assert sorted(seen["details"]) == sorted((r["detail"] or "")[:200] for r in requests)
    assert seen["first_failure"] == report["first_failure"]["detail"]
    assert seen["notes"] == report["notes"] and any("<!--<script>" in note for note in seen["notes"]), seen["notes"]
    assert seen["scripts"] == ["timeline-data", "latency-latency-data", "code", "code"], seen["scripts"]  # no more
    assert seen["titles"][2].endswith(": not published"), seen["titles"]  # its /metrics answered 404


async def _stress_look(url: str) -> dict:
    async with opened(url) as page:
        return {"charts": await page.evaluate("(window.loadreproStress || []).length"),
                "canvases": await page.evaluate("document.querySelectorAll('#stress-charts canvas').length"),
                "links": await page.evaluate("[...document.querySelectorAll('table a')].map(a => a.textContent)"),
                "errors": list(page.errors)}


def test_a_stress_battery_s_phases_draw_in_the_browser_each_linked_to_its_report(tmp_path):
    done = cli("stress", "--phases", "steady,long-context,structured", "--out", str(tmp_path), "--quiet")
    assert done.returncode == 1, done.stderr  # the stock draft pool dies of long-context
    page = (tmp_path / "stress.html").read_text()
    assert not re.search(r"""(src|href)=["']?https?://""", page)
    seen = asyncio.run(_stress_look((tmp_path / "stress.html").as_uri()))
    assert seen["errors"] == [] and seen["charts"] == 1 and seen["canvases"] >= 1, seen
    assert seen["links"] == ["steady", "long-context"], seen  # structured skipped: no run to link to
