"""A judgement: what the judge made of one run, computed once, for the verdict, the live rules' states and the
report alike: what it measured, every rule's finding, and the verdict. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.classify import classify
from loadrepro.judge.findings import Finding
from loadrepro.judge.measurements import Measurements, measure
from loadrepro.judge.verdict import Verdict, decide, in_progress
from loadrepro.records import RunResult, Verification


@dataclass(frozen=True, slots=True)
class Judgement:
    measurements: Measurements  # what the rules judged by, and the report's figures of the same things
    findings: list[tuple[str, Finding | None]]  # every rule's name and finding (None: did not fire), in RULES order
    verdict: Verdict


def judge(result: RunResult, spec: VerdictSpec, final: bool = True, answers: Verification | None = None) -> Judgement:
    """`result` judged under `spec`, with the `answers` [verify] checked after the load; not `final`: a checkpoint's,
    the run still going (verdict `running`)."""
    measured = measure(result, spec, answers)
    findings = classify(result, spec, measured)
    return Judgement(measured, findings, decide(findings) if final else in_progress(findings))
