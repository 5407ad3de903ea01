"""The last stages of a run: its result judged once (judge/judgement.py) and its report built from the result and
that judgement, for the final report and for each checkpoint alike; and report.json's timing of the command."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from loadrepro.config.profile import Profile
from loadrepro.judge.diagnose import diagnose, verification_for
from loadrepro.judge.judgement import judge
from loadrepro.judge.signatures import profile_catalog
from loadrepro.load.live_metrics import LiveMetrics
from loadrepro.records import RunResult, Verification
from loadrepro.report.build import build_report
from loadrepro.report.diagnosis import to_info
from loadrepro.report.write import write_reports
from loadrepro.schema.report_sections import Timing
from loadrepro.schema.run_report import RunReport
from loadrepro.workload.summary import WorkloadSummary


@dataclass(frozen=True, slots=True)
class Reporter:
    """Judging and reporting a run's result, for the final report and for the checkpoints alike."""

    profile: Profile
    workload: WorkloadSummary  # summarised once, before the load: every checkpoint's report reads it
    command: str
    notes: list[str]
    run_dir: Path
    live: LiveMetrics | None = None  # told the rules fired at each judgement

    def _report(self, result: RunResult, final: bool, answers: Verification | None = None) -> RunReport:
        judgement = judge(result, self.profile.verdict, final, answers)
        if self.live is not None:
            self.live.rules((name, f.severity.value if f else None) for name, f in judgement.findings)
        log = self.run_dir / "engine.log"
        catalog = profile_catalog(self.profile)
        verdict = judgement.verdict
        diagnosis = to_info(diagnose([log], catalog, verification_for(self.run_dir, result.engine_cmd),
                                     ((r.signature, r.outcome.value) for r in result.records),
                                     () if verdict.passed else verdict.reasons)) if final and log.exists() else None
        return build_report(result, self.profile, judgement, self.workload, self.command,
                            extra_notes=self.notes, diagnosis=diagnosis)

    def final(self, result: RunResult, answers: Verification) -> RunReport:
        return self._report(result, final=True, answers=answers)

    def checkpoint(self, result: RunResult) -> None:
        write_reports(self._report(result, final=False), self.run_dir)


def timing(result: RunResult, started: int | None) -> Timing:
    sent = [r.sent_ns for r in result.records if r.sent_ns is not None]
    first = min(sent) if sent else None
    last = max((r.end_ns for r in result.records), default=None)
    return Timing(to_first_request_s=round((first - started) / 1e9, 3) if first and started else None,
                  last_answer_to_verdict_s=round((time.perf_counter_ns() - last) / 1e9, 3) if last else None)
