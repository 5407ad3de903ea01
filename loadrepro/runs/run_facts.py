"""run.json: what a run knew before its load began (its label, target, command, workload summary), written then so
that its reports can be rebuilt from its directory later (runs/rebuild.py), even if its process is killed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
from pydantic import BaseModel, Field

from loadrepro.report.files import write_text
from loadrepro.workload.summary import WorkloadSummary

FACTS = "run.json"


class RunFacts(BaseModel):
    """What a run knew before its load began, kept in run.json so that its reports can be rebuilt without it."""

    label: str = Field(description="The run's label (stock, patched, a trial's).")
    base_url: str = Field(description="The target's base URL.")
    model: str = Field(description="The model the requests named.")
    engine_cmd: str | None = Field(description="The command that started the engine, when loadrepro started it.")
    command: str = Field(description="The loadrepro command line that made the run.")
    started_at: str = Field(description="When the load was about to start (ISO 8601, UTC).")
    workload: dict[str, object] = Field(description="The workload's summary, as report.json's workload section.")


def write_facts(run_dir: Path, facts: RunFacts) -> None:
    """Written as the reports are: scrubbed of secrets (the engine command's tokens, a URL's password)."""
    write_text(run_dir / FACTS, facts.model_dump_json(indent=1))


def summary_json(summary: WorkloadSummary) -> dict[str, object]:
    loaded: dict[str, object] = orjson.loads(orjson.dumps(dataclasses.asdict(summary)))
    return loaded
