"""Writes a RunReport's files into its run directory."""

from __future__ import annotations

from pathlib import Path

from loadrepro.report.json import render_json
from loadrepro.report.junit import render_junit
from loadrepro.report.markdown import render_markdown
from loadrepro.report.model import RunReport


def write_reports(report: RunReport, run_dir: Path) -> list[Path]:
    written = []
    for name, render in (("report.json", render_json), ("report.md", render_markdown), ("junit.xml", render_junit)):
        path = run_dir / name
        path.write_text(render(report), encoding="utf-8")
        written.append(path)
    return written
