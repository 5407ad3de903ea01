"""run.json: what a run knew before its load began (its label, target, command, workload summary, the target's
limits and replicas), written then so that its reports can be rebuilt from its directory later (runs/rebuild.py),
even if its process is killed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
from pydantic import BaseModel, Field

from loadrepro.config.capacity import EngineLimits
from loadrepro.report.files import write_text
from loadrepro.workload.summary import WorkloadSummary

FACTS = "run.json"


class RunFacts(BaseModel):
    """What a run knew before its load began, kept in run.json so that its reports can be rebuilt without it."""

    label: str = Field(description="The run's label (stock, patched, a trial's).")
    base_url: str = Field(description="The target's base URL.")
    model: str = Field(description="The model the requests named.")
    engine_cmd: str | None = Field(description="The command that started the engine, when loadrepro started it.")
    engine_cmd_template: str | None = Field(None, description=(
        "That command as given, {port} and {host} unfilled: what starts the engine again on a fresh port (a "
        "shrink's trials). Absent in run directories written before it was kept."))
    command: str = Field(description="The loadrepro command line that made the run.")
    started_at: str = Field(description="When the load was about to start (ISO 8601, UTC).")
    workload: dict[str, object] = Field(description="The workload's summary, as report.json's workload section.")
    # Written by runs since these were judged in a rebuilt report too; a run directory without them rebuilds without.
    limits: EngineLimits | None = Field(None, description="The target's KV limits, from the profile or discovered "
                                                          "(None: unknown).")
    context: tuple[int, str] | None = Field(None, description="The target's longest sequence in tokens and where it "
                                                              "was read, when it publishes one.")
    health_owner: str | None = Field(None, description="Whose the health path is when it is not the engine's (a "
                                                       "gateway's), in words.")
    fresh_engine_ns: int | None = Field(None, description="When the engine loadrepro started first answered /health "
                                        "200 (the run's perf_counter_ns), if no warm-up answered before the load.")
    replicas: list[str] = Field(default_factory=list, description="The base URLs of the replicas beside the target "
                                                                  "([target] replicas, then those started), in order.")


def write_facts(run_dir: Path, facts: RunFacts) -> None:
    """Written as the reports are: scrubbed of secrets (the engine command's tokens, a URL's password)."""
    write_text(run_dir / FACTS, facts.model_dump_json(indent=1))


def read_facts(run_dir: Path) -> RunFacts | None:
    """run.json as the run wrote it; None when it wrote none (its load never began)."""
    path = run_dir / FACTS
    return RunFacts.model_validate_json(path.read_text(encoding="utf-8")) if path.exists() else None


def engine_template(run_dir: Path) -> str | None:
    """The engine command of a run that started one, as its user gave it ({port} unfilled); None when the run
    started none, or was written before templates were kept."""
    facts = read_facts(run_dir)
    return facts.engine_cmd_template if facts is not None else None


def summary_json(summary: WorkloadSummary) -> dict[str, object]:
    loaded: dict[str, object] = orjson.loads(orjson.dumps(dataclasses.asdict(summary)))
    return loaded
