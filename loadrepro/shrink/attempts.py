"""Real trials for the shrinker: every candidate runs on a fresh engine (the simulated one from the profile, or
the engine command), since a failure kills the engine; each is judged by loadrepro's own report. "The same way"
is the original run's first fatal signature, else its engine death, else the engine's error text its first failure
carried (a known signature: requests failing with it, whatever their outcome, since one engine fails the same way
with a 500 or mid-stream by timing alone), else its first failure's outcome, else the first rule that failed it (a
wrong answer fails a run whose requests all completed).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from loadrepro.config.defaults import ENGINE_START_TIMEOUT_S
from loadrepro.config.profile import Profile
from loadrepro.errors import TargetError, UsageError
from loadrepro.judge.signatures import match
from loadrepro.load.engine import as_template
from loadrepro.load.planning import PlanMemo
from loadrepro.runs.run_facts import read_facts
from loadrepro.runs.run_options import RunOptions
from loadrepro.runs.session import run_session
from loadrepro.schema.report_kinds import Severity
from loadrepro.schema.run_report import RunReport
from loadrepro.shrink.search import Trial
from loadrepro.sim.process import as_typed, sim_engine_command
from loadrepro.workload.summary import summarize


@dataclass(frozen=True, slots=True)
class Failure:
    """How a run failed, for comparing trials with the original."""

    kind: str  # signature | death | text | outcome | rule
    name: str

    def __str__(self) -> str:
        return {"signature": f"fatal signature {self.name}", "death": "engine death",
                "text": f"requests failed with {self.name}", "outcome": f"first failure {self.name}",
                "rule": f"rule {self.name}"}[self.kind]


def failure_of(report: RunReport, predicate: str | None = None) -> Failure | None:
    """How `report`'s run failed (None: it passed). With `predicate`, only that signature counts."""
    if predicate is not None:
        return Failure("signature", predicate) if any(s.name == predicate for s in report.signatures) else None
    if report.passed:
        return None
    fatal = sorted((s for s in report.signatures if s.class_ == "F"), key=lambda s: s.first_t_s)
    if fatal:
        return Failure("signature", fatal[0].name)
    if any(r.name == "engine_death" and r.fired for r in report.rules):
        return Failure("death", "engine_death")
    if report.first_failure is not None:
        text = match(report.first_failure.detail)
        if text is not None and any(s.name == text.name and s.failed_requests for s in report.signatures):
            return Failure("text", text.name)
        return Failure("outcome", report.first_failure.outcome)
    failed = next((r.name for r in report.rules if r.fired and r.severity == Severity.FAIL), None)
    return Failure("rule", failed) if failed else None


def same_way(report: RunReport, wanted: Failure) -> bool:
    if wanted.kind == "signature":
        return any(s.name == wanted.name for s in report.signatures)
    if wanted.kind == "death":
        return any(r.name == "engine_death" and r.fired for r in report.rules)
    if wanted.kind == "text":
        return any(s.name == wanted.name and s.failed_requests for s in report.signatures)
    if wanted.kind == "rule":
        return any(r.name == wanted.name and r.fired and r.severity == Severity.FAIL for r in report.rules)
    return report.first_failure is not None and report.first_failure.outcome == wanted.name


@dataclass(frozen=True, slots=True)
class Confirm:
    """--confirm K/N: a candidate fails when at least `k` of up to `n` runs fail the same way (a flaky failure);
    its runs stop once that is decided either way."""

    k: int = 1
    n: int = 1

    def decided(self, failed: int, runs: int) -> bool:
        return failed >= self.k or failed + self.n - runs < self.k


ONCE = Confirm()  # each candidate run once, failing when that run failed


def parse_confirm(text: str) -> tuple[int, Confirm]:
    """`--confirm`: "N" runs the minimal workload N more times after the search; "K/N" judges every candidate by
    K failures in up to N runs."""
    k, slash, n = text.partition("/")
    try:
        first, second = int(k), int(n) if slash else 0
    except ValueError:
        raise UsageError(f"--confirm takes N or K/N (whole numbers), got {text!r}") from None
    if not slash:
        if first < 0:
            raise UsageError(f"--confirm N must be at least 0, got {text!r}")
        return first, ONCE
    if not 1 <= first <= second:
        raise UsageError(f"--confirm K/N needs 1 <= K <= N, got {text!r}")
    return 0, Confirm(first, second)


class Trials:
    """Runs candidates into numbered folders under `root`, keeping only the best failing one's."""

    def __init__(self, root: Path, engine_cmd: str | None, model: str | None, wanted: Failure | None,
                 command: str = "loadrepro run --profile profile.toml", confirm: Confirm = ONCE,
                 engine_start_timeout_s: float = ENGINE_START_TIMEOUT_S) -> None:
        self._root, self._engine_cmd, self._model, self.wanted = root, engine_cmd, model, wanted
        self._command = command  # how to run the minimal workload again, for its report and bundle
        self._confirm = confirm
        self._engine_start_timeout_s = engine_start_timeout_s
        self._count = 0
        self._kept: Path | None = None
        self._plans = PlanMemo()  # a candidate run again (--confirm) is not planned again

    async def __call__(self, profile: Profile) -> Trial:
        """The candidate run until --confirm K/N decides it (once, by default): failing when K runs failed."""
        runs: list[Trial] = []
        while not self._confirm.decided(sum(t.failed for t in runs), len(runs)):
            runs.append(await self._once(profile))
            if runs[-1].how.startswith("cannot be planned") or runs[-1].stops:
                return runs[-1]
        failed = sum(t.failed for t in runs)
        shown = next((t for t in reversed(runs) if t.failed), runs[-1])
        kept = failed >= self._confirm.k
        for t in runs:  # one failing run's folder is kept when the candidate failed; the others go
            if t.run_dir is not None and not (kept and t is shown):
                shutil.rmtree(t.run_dir, ignore_errors=True)
        self._keep(shown.run_dir if kept else None)
        return dataclasses.replace(shown, failed=kept, runs=len(runs), failures=failed,
                                   seconds=sum(t.seconds for t in runs))

    async def _once(self, profile: Profile) -> Trial:
        self._count += 1
        run_dir = self._root / f"trial-{self._count:03d}"
        started = time.monotonic()
        try:
            session = await run_session(RunOptions(profile, None, self._model, "shrink", run_dir, quiet=True,
                                                   command=self._command, engine_cmd=self._engine_cmd,
                                                   engine_start_timeout_s=self._engine_start_timeout_s,
                                                   pictures=False, plans=self._plans),
                                        say=lambda _: None)
        except UsageError as exc:  # a workload too small to plan (a prefix with no room for records): not a failure
            shutil.rmtree(run_dir, ignore_errors=True)
            return Trial(False, 0, 0, time.monotonic() - started, f"cannot be planned: {exc}")
        except TargetError as exc:  # its engine did not start (or answer): no later trial would fare better
            return Trial(False, 0, 0, time.monotonic() - started, "could not run", run_dir,
                         stops=f"the trial could not run: {exc}")
        if session.result.interrupted:
            raise KeyboardInterrupt  # a run cut short proves nothing about its candidate (its report stays)
        if self.wanted is None:  # the first trial names the failure to keep
            self.wanted = failure_of(session.report)
        failed = self.wanted is not None and same_way(session.report, self.wanted)
        summary = summarize(session.plan)
        lengths = tuple((r.conversation, r.turn, r.expected_prompt_tokens, r.max_tokens)
                        for r in session.plan.workload.requests)
        trial = Trial(failed, summary.requests, summary.prompt_tokens_total, time.monotonic() - started,
                      _how(session.report), run_dir, lengths, failures=int(failed))
        return trial

    def _keep(self, best: Path | None) -> None:
        """Only the latest failing candidate's folder stays (it is the best so far): trials are many, and large."""
        if best is None:
            return
        if self._kept is not None and self._kept != best:
            shutil.rmtree(self._kept, ignore_errors=True)
        self._kept = best


def _how(report: RunReport) -> str:
    found = failure_of(report)
    return "passed" if found is None else str(found)


def engine_of(run_dir: Path, engine_cmd: str | None = None) -> tuple[Profile, str | None]:
    """A failing run's profile and engine command template (None: its simulated engine), to shrink it again;
    `engine_cmd` starts the engine instead of the run's own command (a run against a URL has none)."""
    from loadrepro.config.profile_files import load_profile
    from loadrepro.report.json import read_report

    report = read_report(run_dir)
    started = report.target.engine_cmd
    if engine_cmd is None and started is None:
        raise UsageError(f"{run_dir} ran against --base-url {report.target.base_url}: a live engine cannot be "
                         "shrunk, since every trial needs a fresh one. Give --engine-cmd with the command that "
                         "starts it.")
    profile = load_profile(str(run_dir / "profile.toml"))
    if engine_cmd is not None:
        return profile, engine_cmd
    assert started is not None, "checked above"
    return profile, _template(run_dir, started, report.target.base_url, profile)


def _template(run_dir: Path, started: str, base_url: str, profile: Profile) -> str | None:
    """The run's engine command with {port} where its port was, so that every trial's engine listens on the
    port that trial chose (None: the simulated engine the profile describes, started as the run started it)."""
    facts = read_facts(run_dir)
    template = facts.engine_cmd_template if facts is not None else None
    if template is not None:
        return None if template == as_typed(sim_engine_command(profile.sim)) else template
    if started.startswith("loadrepro sim "):  # written before templates were kept: the profile's simulated engine
        return None
    found = as_template(started, base_url)
    if found is None:
        raise UsageError(f"{run_dir}: its engine command does not name the port it served on ({base_url}), so "
                         f"it cannot be started on a fresh one: {started}. Give --engine-cmd with the command, "
                         "{port} where the port goes.")
    return found
