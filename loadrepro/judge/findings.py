"""What a rule finds, and which outcomes count as failures: shared by the per-request and the per-window rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from loadrepro.profile import VerdictSpec
from loadrepro.records import FAILED, RunResult

__all__ = ["FAILED", "Finding", "Rule", "Severity"]


class Severity(StrEnum):
    FAIL = "fail"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    severity: Severity
    summary: str  # plain words, for the verdict's reasons


Rule = Callable[[RunResult, VerdictSpec], Finding | None]
