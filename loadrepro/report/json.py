"""report.json: the RunReport as JSON; and, for `compare`, a stress battery's stress.json or a release matrix's
matrix.json told from it and read back."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from loadrepro.errors import UsageError
from loadrepro.schema.run_report import RunReport
from loadrepro.schema.stress_report import MATRIX_SCHEMA, SCHEMA, MatrixReport, StressReport


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


def read_battery(path: Path) -> StressReport | MatrixReport | None:
    """The stress.json or matrix.json at `path` (the file, or the directory `loadrepro stress --out` wrote), told by
    its schema; None for anything else (a run's report.json or directory), which read_report reads."""
    if path.is_dir():
        found = [path / name for name in ("stress.json", "matrix.json") if (path / name).is_file()]
        if (path / "report.json").is_file() or not found:
            return None
        path = found[0]
    elif path.name == "report.json":
        return None
    try:
        schema = json.loads(path.read_text(encoding="utf-8")).get("schema")
    except (OSError, ValueError, AttributeError):
        return None  # read_report says what is wrong with it
    if schema not in (SCHEMA, MATRIX_SCHEMA):
        return None
    text = path.read_text(encoding="utf-8")
    try:
        return StressReport.model_validate_json(text) if schema == SCHEMA else MatrixReport.model_validate_json(text)
    except ValidationError as exc:
        raise UsageError(f"{path} is not a loadrepro {schema} file: {exc.errors()[0]['msg']}") from exc
