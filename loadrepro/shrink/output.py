"""shrink.md: what the minimal workload is, how it was reached (every trial), and its capacity arithmetic."""

from __future__ import annotations

from loadrepro.config.profile import Profile
from loadrepro.report.markdown import capacity_section
from loadrepro.schema.run_report import RunReport
from loadrepro.shrink.attempts import ONCE, Confirm
from loadrepro.shrink.search import Shrunk, knobs_for


def shrunk_description(original: Profile, shrunk: Shrunk) -> str:
    """What the minimal profile is, from its own keys (the knobs the search turned): not the original's
    description, which tells of the workload it started from."""
    keys = ", ".join(f"{key if section == 'workload' else f'{section}.{key}'} "
                     f"{getattr(getattr(shrunk.profile, section), key)}"
                     for section, key, _ in knobs_for(shrunk.profile))
    best = shrunk.best
    return (f"Shrunk by loadrepro shrink from profile {original.name}: {keys} ({best.requests:,} requests, "
            f"{best.prompt_tokens:,} prompt tokens), the smallest workload found that still fails the same way")


def _factor(before: int, after: int) -> str:
    return f"{before / after:,.1f}x" if after else "-"


def render_shrink(original: Profile, shrunk: Shrunk, failure: str, confirmed: int | None, confirm: int,
                  minimal_run: RunReport, knobs: tuple[tuple[str, str, int], ...], each: Confirm = ONCE) -> str:
    start, best = shrunk.steps[0].trial, shrunk.best
    repeated = each.n > 1
    rule = (f" in at least {each.k} of up to {each.n} runs of each candidate (--confirm {each.k}/{each.n}; the minimal "
            f"workload failed {best.failures} of {best.runs})" if repeated else "")
    lines = [f"# loadrepro shrink: {original.name}", "",
             f"Kept failing the same way: {failure}{rule}.", "",
             f"- requests: {start.requests:,} -> {best.requests:,} ({_factor(start.requests, best.requests)} fewer)",
             f"- prompt tokens: {start.prompt_tokens:,} -> {best.prompt_tokens:,} "
             f"({_factor(start.prompt_tokens, best.prompt_tokens)} fewer)",
             f"- {shrunk.trials} trials ({shrunk.failures} failed) in {shrunk.seconds:,.0f} s; "
             f"stopped: {shrunk.stopped}"]
    if confirmed is not None:
        lines.append(f"- confirmed: the minimal workload failed {confirmed} of {confirm} more runs")
    lines += ["", "Reproduce with `loadrepro run --profile profile.toml` (the engine as in run/report.md), or replay "
              "bundle.zip without loadrepro.", "", "## Minimal workload", "", "| key | original | minimal |",
              "|---|---:|---:|"]
    for section, key, _ in knobs:
        before, after = getattr(getattr(original, section), key), getattr(getattr(shrunk.profile, section), key)
        lines.append(f"| {section}.{key} | {before:,} | {after:,}{' (changed)' if before != after else ''} |")
    lines += ["", "Its requests (prompt + max_tokens is what a KV pool must hold):", "",
              "| conversation | turn | prompt tokens | max_tokens | prompt + max_tokens |",
              "|---:|---:|---:|---:|---:|"]
    lines += [f"| {c} | {t} | {p:,} | {m:,} | {p + m:,} |" for c, t, p, m in best.lengths]
    lines += [""] + capacity_section(minimal_run)
    lines += _steps(shrunk, repeated)
    lines += ["", "## Passes", "", "| knob | trials | failed | s |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {p.trials} | {p.failures} | {p.seconds:.1f} |" for name, p in shrunk.passes.items()]
    return "\n".join(lines + _why_stopped(shrunk)) + "\n"


def render_unshrunk(original: Profile, shrunk: Shrunk) -> str:
    """shrink.md when there is no minimal workload: the original passed, or its trial could not finish."""
    lines = [f"# loadrepro shrink: {original.name}", "", f"No minimal workload: {shrunk.stopped}.", "",
             f"- {shrunk.trials} trials in {shrunk.seconds:,.0f} s", ""]
    return "\n".join(lines + _steps(shrunk, False) + _why_stopped(shrunk)) + "\n"


def render_first_interrupted(original: Profile) -> str:
    """shrink.md when a signal came during the first trial: nothing was found."""
    return (f"# loadrepro shrink: {original.name}\n\nNo minimal workload: interrupted during the first trial (the "
            "original workload).\n")


def _steps(shrunk: Shrunk, repeated: bool) -> list[str]:
    runs = " failed / runs |" if repeated else ""
    lines = ["## Steps", "", f"| # | change | requests | prompt tokens | result |{runs} s |",
             "|---:|---|---:|---:|---|" + ("---:|" if repeated else "") + "---:|"]
    for i, step in enumerate(shrunk.steps):
        t = step.trial
        count = f" {t.failures}/{t.runs} |" if repeated else ""
        lines.append(f"| {i + 1} | {step.change} | {t.requests:,} | {t.prompt_tokens:,} | "
                     f"{t.result} |{count} {t.seconds:.1f} |")
    return lines


def _why_stopped(shrunk: Shrunk) -> list[str]:
    """The whole of what ended the search, when it says more than one line (an engine's log tail)."""
    last = shrunk.steps[-1].trial
    if not shrunk.cut or "\n" not in last.stops:
        return []
    return ["", "## Why it stopped", "", "```", last.stops, "```"]
