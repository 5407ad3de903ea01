"""`loadrepro ab`: the same seeded workload against stock, then patched, each a run of its own, and the two
compared."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from loadrepro.compare.comparison import Comparison, compare
from loadrepro.report.timeline import for_report, timeline_of
from loadrepro.report.write import write_comparison
from loadrepro.runs.progress import Say
from loadrepro.runs.run_options import RunOptions, run_directory
from loadrepro.runs.session import Session, run_session


@dataclass(frozen=True, slots=True)
class AbSession:
    stock: Session
    patched: Session
    comparison: Comparison
    written: list[Path]


# An A/B side: (its URLs, the first the engine and the others its replicas; engine command), at most one given.
Side = tuple[tuple[str, ...], str | None]


def ab_side(options: RunOptions, label: str, side: Side, out: Path) -> RunOptions:
    """One side of an A/B: its URLs or engine command, or the simulated engine with that side's policy."""
    urls, command = side
    target = options.profile.target.model_copy(update={"replicas": urls[1:]})
    profile = options.profile.model_copy(update={
        "sim": options.profile.sim.model_copy(update={"policy": label}), "target": target})
    return dataclasses.replace(options, profile=profile, base_url=urls[0] if urls else None, label=label, out=out,
                               engine_cmd=command, began_ns=options.began_ns if label == "stock" else None)


async def run_ab(options: RunOptions, stock: Side, patched: Side, say: Say = print) -> AbSession:
    """The same seeded workload against stock then patched, each side a (URL, engine command) with at most one
    given; with neither, the simulated engine's two policies. Each managed engine is started fresh."""
    root = run_directory(dataclasses.replace(options, label="ab"))
    sessions: list[Session] = []
    for label, side in (("stock", stock), ("patched", patched)):
        say(f"--- {label} ---")
        sessions.append(await run_session(ab_side(options, label, side, root / label), say))
        if sessions[-1].result.interrupted:
            raise KeyboardInterrupt  # its report is written; the other side is not started
    before, after = sessions
    comparison = compare(before.report, after.report, options.profile.verdict)
    timelines = [for_report(timeline_of(s.result, s.answers), s.report) for s in (before, after)]
    return AbSession(before, after, comparison, write_comparison(comparison, root, timelines))
