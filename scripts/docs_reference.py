"""Writes the reference pages of the docs from the code: every profile key (docs/reference/profile.md), every
report.json field (docs/reference/report.md), the rules and outcomes (docs/reference/rules.md), and report.json's
JSON Schema (docs/report.schema.json). `--check` writes nothing and exits 1 when a committed page differs from
what the code says (the tests run it).

    python scripts/docs_reference.py [--check]
"""

from __future__ import annotations

import enum
import json
import re
import sys
import typing
from pathlib import Path

from pydantic import BaseModel

from loadrepro.config.profile import Profile
from loadrepro.judge.classify import RULES
from loadrepro.judge.findings import FAILED
from loadrepro.records import Outcome
from loadrepro.schema.run_report import RunReport
from loadrepro.schema.stress_report import MatrixReport, StressReport
from loadrepro.stress.phases import PHASES

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _type(annotation: object) -> str:
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):  # its values are what a reader meets
        return " | ".join(f'"{member.value}"' for member in annotation)
    if (args := typing.get_args(annotation)) and any(isinstance(a, type) and issubclass(a, enum.Enum) for a in args):
        return " | ".join("None" if a is type(None) else _type(a) for a in args)
    text = getattr(annotation, "__name__", None) if not typing.get_args(annotation) else None
    # A class is named as a reader meets it in these pages, without the module that defines it.
    named = re.sub(r"loadrepro\.(?:\w+\.)*(\w+)", r"\1", str(annotation))
    return text or named.replace("typing.", "").replace("NoneType", "None")


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The model and every model its fields hold, each once, in the order they are met."""
    found: list[type[BaseModel]] = [model]
    for field in model.model_fields.values():
        for inner in (field.annotation, *typing.get_args(field.annotation)):
            for candidate in (inner, *typing.get_args(inner)):
                if isinstance(candidate, type) and issubclass(candidate, BaseModel) and candidate not in found:
                    found += [m for m in _models(candidate) if m not in found]
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(model: type[BaseModel], defaults: bool) -> list[str]:
    head = "| key | type | default | description |\n|---|---|---|---|" if defaults else \
        "| field | type | description |\n|---|---|---|"
    rows = [head]
    for name, field in model.model_fields.items():
        key = field.alias or name
        described = _cell(field.description or "")
        if defaults:
            value = None if field.is_required() else field.get_default(call_default_factory=True)
            default = "required" if field.is_required() else f"`{_cell(repr(value))}`"
            rows.append(f"| `{key}` | section | | see `[{key}]` below |" if isinstance(value, BaseModel) else
                        f"| `{key}` | `{_cell(_type(field.annotation))}` | {default} | {described} |")
        else:
            rows.append(f"| `{key}` | `{_cell(_type(field.annotation))}` | {described} |")
    return rows


def _entries(model: type[BaseModel], prefix: str, heading: str = "###") -> list[str]:
    """The keys of each repeatable entry `model` holds ([[chaos.events]], [[watch.endpoints]]...): a list of
    sections whose own keys and defaults the section's table cannot show."""
    lines: list[str] = []
    for name, field in model.model_fields.items():
        for inner in typing.get_args(field.annotation):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                doc = _cell(inner.__doc__ or "")
                lines += [f"{heading} [[{prefix}{field.alias or name}]]", "", *([doc, ""] if doc else []),
                          *_table(inner, defaults=True), ""]
    return lines


def profile_page() -> str:
    lines = ["# Profile reference", "", "A profile is a TOML file (`profiles/` holds the built-in ones). Top-level "
             "keys first, then each section; `--set section.key=VALUE` overrides any of them. Generated from "
             "`loadrepro/config/profile.py` and `loadrepro/config/workload_spec.py`.", "",
             *_table(Profile, defaults=True), "", *_entries(Profile, "", "##")]
    for name, field in Profile.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            doc = _cell(annotation.__doc__ or "")
            lines += [f"## [{name}]", "", *([doc, ""] if doc else []), *_table(annotation, defaults=True), "",
                      *_entries(annotation, f"{name}.")]
    return "\n".join(lines)


def report_page() -> str:
    lines = ["# report.json reference", "", f"Schema `{RunReport.model_fields['schema_'].default}`; the JSON Schema is "
             "[report.schema.json](../report.schema.json). Generated from `loadrepro/schema/run_report.py`.", ""]
    for model in _models(RunReport):
        doc = _cell(model.__doc__ or "") if model.__doc__ != BaseModel.__doc__ else ""
        lines += [f"## {model.__name__}", "", *([doc, ""] if doc else []), *_table(model, defaults=False), ""]
    return "\n".join(lines)


def stress_page() -> str:
    lines = ["# stress.json and matrix.json reference", "",
             "`loadrepro stress` runs the battery's phases in this order (the names are part of the contract; "
             "`--phases a,b` chooses), each a run of its own with its report.json, then writes stress.json; with "
             "several `--engine-cmd` (a `--label` each), a release matrix: each build's stress.json in its own "
             "directory, and matrix.json. Generated from `loadrepro/stress/phases.py` and "
             "`loadrepro/schema/stress_report.py`.", "", "## Phases", "", "| phase | what it sends |", "|---|---|"]
    lines += [f"| `{p.name}` | {_cell(p.traffic)} |" for p in PHASES]
    lines.append("")
    for top in (StressReport, MatrixReport):
        lines += [f"## {top.__name__} (schema `{top.model_fields['schema_'].default}`)", ""]
        for model in _models(top):
            doc = _cell(model.__doc__ or "") if model.__doc__ != BaseModel.__doc__ else ""
            lines += [f"### {model.__name__}", "", *([doc, ""] if doc else []), *_table(model, defaults=False), ""]
    return "\n".join(lines)


def rules_page() -> str:
    lines = ["# Rules and outcomes", "", "Every request gets one outcome; the rules, in the order they are judged, "
             "read the outcomes, the watchers' samples and the engine's log. A rule's finding is a failure or "
             "information; the run fails when any finding is a failure. Generated from `loadrepro/judge/` and "
             "`loadrepro/records.py`.", "", "## Outcomes", "", "| outcome | counts as a failure |", "|---|---|"]
    lines += [f"| `{o.value}` | {'yes' if o in FAILED else 'no'} |" for o in Outcome]
    lines += ["", "## Rules", ""]
    for rule in RULES:
        lines += [f"### `{rule.__name__}`", "", _cell(rule.__doc__ or ""), ""]
    return "\n".join(lines)


def pages() -> dict[Path, str]:
    return {DOCS / "reference" / "profile.md": profile_page(), DOCS / "reference" / "report.md": report_page(),
            DOCS / "reference" / "rules.md": rules_page(), DOCS / "reference" / "stress.md": stress_page(),
            DOCS / "report.schema.json": json.dumps(RunReport.model_json_schema(by_alias=True), indent=2) + "\n"}


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for path, text in pages().items():
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("out of date (run python scripts/docs_reference.py): " + ", ".join(stale))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
