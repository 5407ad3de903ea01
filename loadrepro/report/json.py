"""report.json: the RunReport as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from loadrepro.report.model import RunReport


def render_json(report: RunReport) -> str:
    return json.dumps(report.dump(), indent=2) + "\n"


def read_report(path: Path) -> RunReport:
    """A report.json, or the one inside a run directory."""
    if path.is_dir():
        path = path / "report.json"
    return RunReport.model_validate_json(path.read_text(encoding="utf-8"))
