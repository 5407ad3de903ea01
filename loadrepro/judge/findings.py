"""What a rule finds, and which outcomes count as failures: shared by the per-request and the per-window rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadrepro.profile import VerdictSpec
from loadrepro.records import FAILED, RunResult
from loadrepro.run_report import Severity

__all__ = ["FAILED", "Finding", "Rule", "Severity"]


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    severity: Severity
    summary: str  # plain words, for the verdict's reasons


Rule = Callable[[RunResult, VerdictSpec], Finding | None]


def quote(text: str, limit: int = 160) -> str:
    """An engine's words in a finding: on one line, in backticks, cut at `limit` characters."""
    text = " ".join(text.split())
    return f"`{text[:limit]}{'...' if len(text) > limit else ''}`"
