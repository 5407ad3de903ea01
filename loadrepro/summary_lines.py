"""A few plain lines about a finished run, for the terminal."""

from __future__ import annotations

from pathlib import Path

from loadrepro.report.model import RunReport


def describe_verdict(report: RunReport, written: list[Path]) -> list[str]:
    outcomes = ", ".join(f"{k} {v}" for k, v in report.requests.by_outcome.items())
    lines = [f"verdict: {report.verdict.upper()}  ({report.requests.total} requests in {report.duration_s:.1f} s: "
             f"{outcomes}; /health after: {report.health.post})"]
    lines += [f"  - {reason}" for reason in report.reasons]
    lines += [f"report: {path}" for path in written]
    return lines
