"""`loadrepro sweep`: one full run per load level (concurrency or arrival rate), each with its verdict, then a
bisection between the last level that passed and the first that failed: the latency-throughput curve, the
breaking point (and by which rule), and the most load that met the SLO. With a stock and a patched engine, both
ladders alike, and where each breaks. Each level runs on a fresh engine when loadrepro starts it (an engine command,
or the simulated engine); against a URL every level meets what the one before left in it, and the sweep says so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from loadrepro.config.profile import Profile
from loadrepro.errors import UsageError
from loadrepro.load.planning import PlanMemo
from loadrepro.report.sweep import write_sweep
from loadrepro.runs.ab import Side, ab_side
from loadrepro.runs.progress import Say
from loadrepro.runs.repeats import run_trials
from loadrepro.runs.run_options import RunOptions, run_directory
from loadrepro.runs.session import run_session
from loadrepro.schema.report_kinds import Severity
from loadrepro.schema.run_report import RunReport
from loadrepro.schema.sweep_report import Break, SweepCurve, SweepLevel, SweepReport

MAX_BISECTIONS = 6  # runs a bisection may add
RATE_RESOLUTION = 1.1  # a rate's breaking point is bisected until the failing level is within 10% of the passing one
LAG_MS, LAG_SHARE = 10.0, 0.2  # a level whose wait before sending (p95) was over both: the client set the pace


@dataclass(frozen=True, slots=True)
class SweepSession:
    run_dir: Path
    report: SweepReport
    written: list[Path]


def ladder(over: str, values: str | None, low: float | None, high: float | None, factor: float) -> list[float]:
    """The levels asked for: a comma-separated list, or a geometric ladder from `low` to `high` (both in);
    concurrency levels are whole and at least 1."""
    if values is not None:
        try:
            levels = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise UsageError(f"--values wants numbers separated by commas, got {values!r}") from None
    else:
        assert low is not None and high is not None, "checked by SweepArguments"
        if high < low:
            raise UsageError(f"--to ({high:g}) is below --from ({low:g})")
        steps = int(math.floor(math.log(high / low) / math.log(factor) + 1e-9))
        levels = [low * factor ** i for i in range(steps + 1)] + [high]
    if over == "concurrency":
        if any(v < 1 or v != round(v) for v in levels) and values is not None:
            raise UsageError(f"concurrency levels are whole numbers of at least 1, got {values}")
        levels = [float(max(1, round(v))) for v in levels]
    if not levels or any(v <= 0 for v in levels):
        raise UsageError("give at least one level, each above 0")
    return sorted(set(levels))


def at_level(profile: Profile, over: str, value: float) -> Profile:
    """The profile with its load at `value`: a closed loop of that many requests in flight, or Poisson arrivals at
    that rate (its concurrency then only a cap); a zigzag's peak. Bursts and a rate series have no one rate to set."""
    if over == "rate" and profile.load.arrival in ("bursts", "series"):
        raise UsageError(f"a sweep over rate sets [load] rate, which arrival = '{profile.load.arrival}' does not use: "
                         "sweep a profile of arrival = 'poisson', 'zigzag' or 'closed' (made Poisson)")
    update: dict[str, object] = {"concurrency": int(value)} if over == "concurrency" else {
        "rate": value, **({"arrival": "poisson"} if profile.load.arrival == "closed" else {})}
    return profile.model_copy(update={"load": profile.load.model_copy(update=update)})


def _name(value: float) -> str:
    return f"{value:g}".replace(".", "_")


async def _run_level(options: RunOptions, over: str, value: float, root: Path) -> tuple[RunReport, Path]:
    profile = at_level(options.profile, over, value)
    out = root / f"level-{_name(value)}"
    level = dataclasses.replace(options, profile=profile, out=out, pictures=False, on_verdict=None, quiet=True,
                                began_ns=None)
    if level.trials > 1:
        trial_set = await run_trials(level, say=lambda _: None)
        return trial_set.report, trial_set.run_dir
    session = await run_session(level, lambda _: None)
    if session.result.interrupted:
        raise KeyboardInterrupt
    return session.report, session.run_dir


def _client_bound(over: str, report: RunReport) -> str | None:
    """A rate level the client could not send on time: requests waited in loadrepro before being sent (its
    concurrency cap full, or its CPU behind) for a large part of their latency. (A closed loop's requests wait for a
    slot by design: that is the level, not the client's limit.)"""
    queue, ttft = report.latency.queue_ms.p95, report.latency.ttft_ms.p50
    if over != "rate" or queue is None or not ttft or queue <= LAG_MS or queue <= LAG_SHARE * ttft:
        return None
    concurrency = report.profile.get("load", {}).get("concurrency")
    return (f"requests waited in loadrepro before being sent (p95 {queue:,.0f} ms, against the engine's TTFT p50 of "
            f"{ttft:,.0f} ms): its concurrency cap of {concurrency} or its CPU, not the engine, set the pace")


def _level(over: str, value: float, report: RunReport, run_dir: Path, bisected: bool) -> SweepLevel:
    failing = [r for r in report.rules if r.fired and r.severity == Severity.FAIL]
    return SweepLevel(value=value, verdict=report.verdict, rules_fired=[r.name for r in failing],
                      reasons=list(report.reasons), throughput=report.throughput, latency=report.latency,
                      slo=report.slo, client_bound=_client_bound(over, report), bisected=bisected,
                      run_dir=str(run_dir))


def _break(levels: list[SweepLevel]) -> tuple[Break | None, bool]:
    failed = [lv for lv in levels if lv.broke]
    if not failed:
        return None, True
    first = failed[0]
    below = [lv for lv in levels if lv.value < first.value and not lv.broke]
    monotone = all(lv.broke for lv in levels if lv.value > first.value)
    named = [(rule, reason) for rule, reason in zip(first.rules_fired, first.reasons, strict=False) if rule != "slo"]
    rule = f"{named[0][0]}: {named[0][1]}" if named else "; ".join(first.reasons[:1]) or "failed"
    return Break(last_pass=below[-1].value if below else None, first_fail=first.value, rule=rule), monotone


def _between(over: str, low: float, high: float) -> float | None:
    """The level a bisection tries next between a passing `low` and a failing `high` (None: close enough)."""
    if over == "concurrency":
        mid = float((int(low) + int(high)) // 2)
        return mid if low < mid < high else None
    return math.sqrt(low * high) if high / low > RATE_RESOLUTION else None


def _slo_capacity(levels: list[SweepLevel], first: Break | None, required: float) -> float | None:
    held = [lv.value for lv in levels if lv.met_slo(required) and (first is None or lv.value < first.first_fail)]
    return max(held, default=None)


def _slo_edge(levels: list[SweepLevel], first: Break | None, required: float) -> tuple[float, float] | None:
    """The SLO capacity and the lowest level above it that missed the SLO (without breaking): where a bisection
    finds the most load that met it."""
    capacity = _slo_capacity(levels, first, required)
    above = [lv.value for lv in levels if capacity is not None and lv.value > capacity and not lv.broke
             and not lv.met_slo(required)]
    return (capacity, min(above)) if capacity is not None and above else None


async def sweep_curve(options: RunOptions, over: str, levels: list[float], stop_at_failure: bool, bisect: bool,
                      root: Path, say: Say) -> SweepCurve:
    """One engine's ladder (and bisection), each level a full run in `root`/level-VALUE."""
    done: list[SweepLevel] = []

    async def run(value: float, bisected: bool) -> SweepLevel:
        report, run_dir = await _run_level(options, over, value, root)
        level = _level(over, value, report, run_dir, bisected)
        done.append(level)
        done.sort(key=lambda lv: lv.value)
        said = f"; {', '.join(level.rules_fired)}" if level.rules_fired else ""
        say(f"{options.label} {over} {value:g}: {level.verdict}{said} ({level.throughput.output_tokens_per_s:,.1f} "
            f"output tokens/s, TTFT p95 {_ms(level.latency.ttft_ms.p95)})")
        return level

    try:
        await _ladder(run, done, over, levels, stop_at_failure, bisect, options.profile.slo.min_attainment)
    except KeyboardInterrupt:  # the levels run so far are the sweep's report; the caller ends as interrupted
        found, monotone = _break(done)
        return SweepCurve(label=options.label, levels=done, break_=found, monotone=monotone, interrupted=True,
                          slo_capacity=_slo_capacity(done, found, options.profile.slo.min_attainment))
    found, monotone = _break(done)
    return SweepCurve(label=options.label, levels=done, break_=found, monotone=monotone,
                      slo_capacity=_slo_capacity(done, found, options.profile.slo.min_attainment))


async def _ladder(run: Callable[[float, bool], Awaitable[SweepLevel]], done: list[SweepLevel], over: str,
                  levels: list[float], stop_at_failure: bool, bisect: bool, required: float) -> None:
    """The ladder, then the bisections: to the breaking point, then to the most load that met the SLO."""
    for value in levels:
        if (await run(value, False)).broke and stop_at_failure:
            break
    found, _ = _break(done)
    for _ in range(MAX_BISECTIONS if bisect else 0):
        if found is None or found.last_pass is None:
            break
        mid = _between(over, found.last_pass, found.first_fail)
        if mid is None:
            break
        await run(mid, True)
        found, _ = _break(done)
    for _ in range(MAX_BISECTIONS if bisect else 0):  # then the most load that met the SLO
        edge = _slo_edge(done, found, required)
        mid = _between(over, *edge) if edge is not None else None
        if mid is None:
            break
        await run(mid, True)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def _holds(curve: SweepCurve, over: str) -> str:
    unit = "requests in flight" if over == "concurrency" else "requests/s"
    if not curve.levels:
        return f"{curve.label}: no level ran"
    if curve.break_ is None:
        said = f"{curve.label} holds through {curve.levels[-1].value:g} {unit}"
    else:
        rule = curve.break_.rule.split(":")[0]
        said = f"{curve.label} breaks at {curve.break_.first_fail:g} {unit} ({rule})" + (
            f", after passing {curve.break_.last_pass:g}" if curve.break_.last_pass is not None else
            ", its lowest level")
    return said + (f", and met the SLO up to {curve.slo_capacity:g}" if curve.slo_capacity is not None else "")


async def run_sweep(options: RunOptions, over: str, levels: list[float], stop_at_failure: bool, bisect: bool,
                    sides: tuple[Side, Side] | None, say: Say) -> SweepSession:
    """A sweep of one engine (`options`' target) or, with `sides`, of a stock and a patched engine alike; sweep.json,
    sweep.md and sweep.html in the sweep directory."""
    options = dataclasses.replace(options, plans=options.plans or PlanMemo())
    root = run_directory(dataclasses.replace(options, label="sweep"))
    notes = [] if options.base_url is None else [
        f"every level ran against the same target at {options.base_url}, so what one level left in it the next met "
        "(a fresh engine per level needs --engine-cmd, or the simulated engine)"]
    if over == "concurrency" and options.profile.workload.kind == "conversations" and \
            options.profile.load.duration_s is None and options.profile.workload.conversations < max(levels):
        notes.append(f"the profile has {options.profile.workload.conversations} conversations: levels above that "
                     "cannot keep that many requests in flight")
    stock: SweepCurve | None = None
    if sides is not None:
        stock = await sweep_curve(ab_side(options, "stock", sides[0], root / "stock"), over, levels,
                                  stop_at_failure, bisect, root / "stock", say)
        patched = ab_side(options, "patched", sides[1], root / "patched")
        swept = SweepCurve(label="patched", levels=[], break_=None, slo_capacity=None, monotone=True,
                           interrupted=True) if stock.interrupted else \
            await sweep_curve(patched, over, levels, stop_at_failure, bisect, root / "patched", say)
    else:
        swept = await sweep_curve(options, over, levels, stop_at_failure, bisect, root, say)
    interrupted = swept.interrupted or (stock is not None and stock.interrupted)
    if interrupted:
        notes.append("interrupted: the levels listed are those that ran before it")
    conclusion = "; ".join(_holds(c, over) for c in (stock, swept) if c is not None)
    report = SweepReport(over=over, profile=options.profile.name, command=options.command,
                         fresh_engine=options.base_url is None, label=swept.label, levels=swept.levels,
                         break_=swept.break_, slo_capacity=swept.slo_capacity, monotone=swept.monotone, stock=stock,
                         interrupted=interrupted,
                         conclusion=conclusion,
                         notes=notes + [f"{c.label}: not monotone: a level above its first failure passed (a flaky "
                                        "failure? --trials N per level)" for c in (stock, swept)
                                        if c is not None and not c.monotone])
    return SweepSession(root, report, write_sweep(report, root, options.png))
