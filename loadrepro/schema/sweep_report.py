"""A sweep's report (sweep.json): each load level's run in figures, where each engine first failed, and the most
load that met the SLO. Written by loadrepro/runs/sweeps.py, drawn by report/sweep.py."""

from __future__ import annotations

from pydantic import Field

from loadrepro.schema.long_run_sections import SloInfo
from loadrepro.schema.report_kinds import Model, VerdictStatus
from loadrepro.schema.report_sections import Latency, Throughput

SCHEMA = "loadrepro.sweep/1"



class SweepLevel(Model):
    value: float = Field(description="The level: requests in flight at most, or arrivals per second.")
    verdict: VerdictStatus = Field(
        description="Its run's verdict: pass or fail (with trials, fail when any trial failed).")
    rules_fired: list[str] = Field(description="The rules whose failures failed it.")
    reasons: list[str] = Field(description="Its run's reasons, in words.")
    throughput: Throughput = Field(description="Completed requests and output tokens per second.")
    latency: Latency = Field(description="Its latency percentiles (TTFT, ITL, end to end, loadrepro's own wait).")
    slo: SloInfo | None = Field(description="Its requests against [slo] (null: no limit set).")
    client_bound: str | None = Field(description="When the client, not the engine, set the pace at this level: why.")
    bisected: bool = Field(description="Run by the bisection, not on the ladder.")
    run_dir: str = Field(description="Its run directory (report.json, report.md, the records).")

    @property
    def broke(self) -> bool:
        """The engine failed at this level: a rule other than `slo` failed it (missing the SLO is the SLO
        capacity's to say, not a breaking point)."""
        failed = self.verdict is not VerdictStatus.PASS
        return any(rule != "slo" for rule in self.rules_fired) or (failed and not self.rules_fired)

    def met_slo(self, required: float) -> bool:
        """Its requests met [slo] min_attainment (`required` > 0) and it did not break."""
        return (required > 0 and self.slo is not None and self.slo.attainment is not None
                and self.slo.attainment >= required and not self.broke)


class Break(Model):
    last_pass: float | None = Field(description="The highest level below the first failure that passed (null: "
                                    "the lowest level failed).")
    first_fail: float = Field(description="The lowest level that failed.")
    rule: str = Field(description="The first rule that failed it, with its words.")


class SweepCurve(Model):
    label: str = Field(description="The engine swept: run, stock or patched.")
    levels: list[SweepLevel] = Field(description="Every level run, lowest first.")
    break_: Break | None = Field(alias="break", description="Where it first failed (null: it held at every level).")
    slo_capacity: float | None = Field(description="The highest level whose requests met [slo] min_attainment, "
                                       "below any failure (null: no [slo] min_attainment, or no level met it).")
    monotone: bool = Field(description="False: a level above the first failure passed (a flaky failure? "
                           "--trials N).")
    interrupted: bool = Field(False, description="Stopped by Ctrl-C or SIGTERM: the levels are those run before.")


class SweepReport(Model):
    schema_: str = Field(SCHEMA, alias="schema", description="The schema's name and version.")
    over: str = Field(description="What was varied: concurrency or rate.")
    profile: str = Field(description="The profile swept.")
    command: str = Field(description="The command that ran it.")
    fresh_engine: bool = Field(description="Every level ran on a fresh engine (false: the same target at a URL).")
    label: str = Field(description="The swept engine: run (or the simulated engine's policy), or patched in an A/B.")
    levels: list[SweepLevel] = Field(description="The swept engine's levels (the patched one's in an A/B).")
    break_: Break | None = Field(alias="break", description="Where it first failed (null: it held at every level).")
    slo_capacity: float | None = Field(description="The most load that met the SLO (see SweepCurve).")
    monotone: bool = Field(description="False: a level above the first failure passed.")
    interrupted: bool = Field(False, description="Stopped by Ctrl-C or SIGTERM: what ran before is reported.")
    stock: SweepCurve | None = Field(None, description="An A/B's stock engine, swept alike.")
    conclusion: str = Field(description="Where each engine breaks, in words.")
    notes: list[str] = Field(description="What the reader should know about how it was swept.")

    def curves(self) -> list[SweepCurve]:
        """Each engine swept: the stock one first in an A/B."""
        swept = SweepCurve(label=self.label, levels=self.levels, break_=self.break_, slo_capacity=self.slo_capacity,
                           monotone=self.monotone, interrupted=self.interrupted)
        return [swept] if self.stock is None else [self.stock, swept]
