"""report.json: the RunReport as JSON."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from loadrepro.errors import UsageError
from loadrepro.schema.run_report import RunReport


def render_json(report: RunReport) -> str:
    return report.dump_json()


def read_report(path: Path) -> RunReport:
    """A report.json, or the one inside a run directory."""
    if path.is_dir():
        path = path / "report.json"
    try:
        return RunReport.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read a report at {path}: {exc.strerror}") from exc
    except ValidationError as exc:
        raise UsageError(f"{path} is not a loadrepro report: {exc.errors()[0]['msg']}") from exc
