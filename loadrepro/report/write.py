"""Writes a RunReport's files into its run directory, with its pictures when the run's timeline is at hand."""

from __future__ import annotations

from pathlib import Path

from loadrepro.report import plots
from loadrepro.report.html import render_html
from loadrepro.report.json import render_json
from loadrepro.report.junit import render_junit
from loadrepro.report.markdown import render_markdown
from loadrepro.report.model import RunReport
from loadrepro.report.timeline import Timeline

TIMELINE_PNG, LATENCY_PNG = "timeline.png", "latency.png"


def write_reports(report: RunReport, run_dir: Path, timeline: Timeline | None = None) -> list[Path]:
    written = [_write(run_dir / "report.json", render_json(report))]
    if timeline is not None:
        written += _pictures(report, run_dir, timeline)
    written.append(_write(run_dir / "report.md", render_markdown(report, images=timeline is not None)))
    written.append(_write(run_dir / "junit.xml", render_junit(report)))
    return written


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _pictures(report: RunReport, run_dir: Path, timeline: Timeline) -> list[Path]:
    figures = {"timeline": plots.timeline_figure([timeline]), "lanes": plots.lanes_figure(timeline),
               "latency": plots.latency_figure(timeline)}
    try:
        svgs = {name: plots.svg(fig) for name, fig in figures.items()}
        written = [_write(run_dir / TIMELINE_PNG, plots.png(figures["timeline"])),
                   _write(run_dir / LATENCY_PNG, plots.png(figures["latency"]))]
    finally:
        for fig in figures.values():
            plots.close(fig)
    written.append(_write(run_dir / "report.html", render_html(report, svgs["timeline"], svgs["lanes"],
                                                                svgs["latency"])))
    return written
