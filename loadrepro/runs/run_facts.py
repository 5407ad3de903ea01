"""run.json: what a run knew before its load began (its label, target, command, workload summary), written then so
that its reports can be rebuilt from its directory later (runs/rebuild.py), even if its process is killed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
from pydantic import BaseModel, Field

from loadrepro.records.redact import scrub
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
    """Written with the command and URL scrubbed of secrets, as report.json says them."""
    clean = facts.model_copy(update={"command": scrub(facts.command), "base_url": scrub(facts.base_url)})
    (run_dir / FACTS).write_text(clean.model_dump_json(indent=1), encoding="utf-8")


def summary_json(summary: WorkloadSummary) -> dict[str, object]:
    loaded: dict[str, object] = orjson.loads(orjson.dumps(dataclasses.asdict(summary)))
    return loaded
