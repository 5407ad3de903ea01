"""What a rule finds, and which outcomes count as failures: shared by the per-request and the per-window rules."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from loadrepro.config.profile import VerdictSpec
from loadrepro.records import FAILED, RunResult
from loadrepro.schema.report_kinds import Severity

__all__ = ["FAILED", "Fact", "Finding", "Rule", "Severity"]

Fact = int | float | str  # a number or a name a finding states


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    severity: Severity
    summary: str  # plain words, for the verdict's reasons
    # What the summary says, as named numbers and names, for machines (a CI job, a test) that must not parse words.
    # Each rule's docstring lists its keys (docs/reference/rules.md).
    facts: Mapping[str, Fact] = field(default_factory=dict)


Rule = Callable[[RunResult, VerdictSpec], Finding | None]


def grouped(said: Iterable[str]) -> list[str]:
    """Each different thing said once, in the order first said, with how many times when more than once: eight
    requests that failed alike are one line, not eight."""
    counts = Counter(said)
    return [f"{text} (x{n})" if n > 1 else text for text, n in counts.items()]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun, agreeing: "1 request", "1,200 requests" (`plural`, else `noun` and an s); the one
    place counts are put into words."""
    return f"{n:,} {noun if n == 1 else plural or f'{noun}s'}"


def quote(text: str, limit: int = 160) -> str:
    """An engine's words in a finding: on one line, in backticks, cut at `limit` characters."""
    text = " ".join(text.split())
    return f"`{text[:limit]}{'...' if len(text) > limit else ''}`"
