"""Findings -> a pass/fail verdict with its reasons in plain words."""

from __future__ import annotations

from dataclasses import dataclass

from loadrepro.judge.findings import Finding, Severity
from loadrepro.schema.report_kinds import VerdictStatus


@dataclass(frozen=True, slots=True)
class Verdict:
    status: VerdictStatus
    reasons: tuple[str, ...]  # why it failed, most telling first; for a pass, what was noticed on the way

    @property
    def passed(self) -> bool:
        return self.status is VerdictStatus.PASS


def decide(findings: list[tuple[str, Finding | None]]) -> Verdict:
    fired = [f for _, f in findings if f is not None]
    failures = [f.summary for f in fired if f.severity is Severity.FAIL]
    if failures:
        return Verdict(VerdictStatus.FAIL, tuple(failures))
    return Verdict(VerdictStatus.PASS, tuple(f.summary for f in fired))


def in_progress(findings: list[tuple[str, Finding | None]]) -> Verdict:
    """A checkpoint's verdict while the run goes on: `running`, with the failures found so far as reasons."""
    failures = (f.summary for _, f in findings if f is not None and f.severity is Severity.FAIL)
    return Verdict(VerdictStatus.RUNNING, tuple(failures))
