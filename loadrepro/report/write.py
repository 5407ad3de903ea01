"""Writes reports to disk: a run's files (with its pictures when its timeline is at hand) and a comparison's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from loadrepro.config.defaults import pictures_wanted
from loadrepro.report.comparison_markdown import render_comparison, render_gate
from loadrepro.report.files import write_text
from loadrepro.report.html import Charts, Pngs, img, render_comparison_html, render_html
from loadrepro.report.interactive import latency_section, timeline_section, with_scripts
from loadrepro.report.json import render_json
from loadrepro.report.junit import render_junit
from loadrepro.report.markdown import render_markdown
from loadrepro.report.timeline import Timeline, for_report
from loadrepro.schema.run_report import RunReport

if TYPE_CHECKING:  # a run's own reports compare nothing: comparisons and sweeps import these themselves
    from loadrepro.compare.comparison import Comparison
    from loadrepro.compare.gate import Gate

TIMELINE_PNG, LATENCY_PNG = "timeline.png", "latency.png"
PICTURES = (TIMELINE_PNG, LATENCY_PNG)  # a run's PNG files, for report.md, bundles and trackers that show images


def write_reports(report: RunReport, run_dir: Path, timeline: Timeline | None = None, png: bool = False) -> list[Path]:
    """The run's files; with its timeline, report.html (its charts drawn by the browser) unless PICTURES_ENV turns
    pictures off, and with `png` the pictures as PNG files too (for report.md and bug trackers that show images)."""
    timeline = timeline if pictures_wanted() else None
    written = [write_text(run_dir / "report.json", render_json(report))]
    if timeline is not None:
        written += _pages(report, run_dir, timeline, png)
    written.append(write_text(run_dir / "report.md", render_markdown(
        report, images=timeline is not None and png, page=timeline is not None)))
    written.append(write_text(run_dir / "junit.xml", render_junit(report)))
    return written


def _pages(report: RunReport, run_dir: Path, timeline: Timeline, png: bool) -> list[Path]:
    timeline = for_report(timeline, report)
    charts = Charts(timeline_section(timeline), latency_section([timeline]))
    written, pngs = [], None
    if png:
        from loadrepro.report import plots  # matplotlib: imported only when PNGs are asked for (0.8 s a run)

        # Each picture drawn once: the PNG file for report.md is the picture inside report.html.
        drawn = png_files(timeline)
        written += [write_text(run_dir / name, picture) for name, picture in drawn.items()]
        pngs = Pngs(img(drawn[TIMELINE_PNG], "timeline"), img(plots.png(plots.lanes_figure(timeline)), "conversations"),
                    img(drawn[LATENCY_PNG], "latency"))
    written.append(write_text(run_dir / "report.html", with_scripts(render_html(report, charts, pngs))))
    return written


def png_files(timeline: Timeline) -> dict[str, bytes]:
    """A run's PNG files (PICTURES), drawn from its timeline."""
    from loadrepro.report import plots  # matplotlib: imported only when PNGs are asked for

    return {TIMELINE_PNG: plots.png(plots.timeline_figure([timeline])),
            LATENCY_PNG: plots.png(plots.latency_figure(timeline))}


def write_gate(result: Gate, out: Path, baseline: str, run: str) -> list[Path]:
    """gate.md and gate.json."""
    out.mkdir(parents=True, exist_ok=True)
    return [write_text(out / "gate.md", render_gate(result, baseline, run)),
            write_text(out / "gate.json", result.model_dump_json(indent=2) + "\n")]


def write_comparison(comparison: Comparison, out: Path, timelines: list[Timeline] | None = None) -> list[Path]:
    """compare.md and compare.json; with both runs' timelines, compare.html with them on one time axis."""
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "compare.md", out / "compare.json"
    write_text(md, render_comparison(comparison))
    write_text(js, comparison.model_dump_json(indent=2) + "\n")
    written = [md, js]
    if timelines and pictures_wanted():
        sides = [timeline_section(t, f"side{i}") for i, t in enumerate(timelines)]
        page = render_comparison_html(comparison, sides, latency_section(timelines))
        written.append(write_text(out / "compare.html", with_scripts(page)))
    return written
