"""What every part of report.json shares: the verdict's and a finding's kinds, and the model they are made of."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class VerdictStatus(StrEnum):
    """A run's verdict: report.json's `verdict`, a trial's, the judge's."""

    PASS = "pass"
    FAIL = "fail"
    RUNNING = "running"  # a checkpoint written while the run goes on


# The rule that fails a run which tested nothing (not one request fit the target, and it refused them all): the
# profile's failure against this target, not the engine's; `loadrepro run` exits 2 (usage) when it fails alone.
NOTHING_FIT = "nothing_fit"


class Severity(StrEnum):
    """What a rule's finding does to the verdict: fails it, or is said beside it."""

    FAIL = "fail"
    INFO = "info"


class Model(BaseModel):
    """Every part of report.json: frozen, and nothing beside its fields. A float that is not a number is written as
    Python's json module writes it (NaN, Infinity), so that a report reads back as it was written."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, ser_json_inf_nan="constants")
