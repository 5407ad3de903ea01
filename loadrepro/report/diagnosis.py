"""A Diagnosis as terminal text, Markdown and JSON (rendering only)."""

from __future__ import annotations

import dataclasses
import json

from loadrepro.judge.diagnose import Diagnosis, Occurrence
from loadrepro.judge.signatures import CATALOG
from loadrepro.schema.report_sections import DiagnosisInfo

EXCERPT_LINES = 100


def _where(o: Occurrence) -> str:
    stamp = f", {o.timestamp}" if o.timestamp else ""
    return f"{o.file}:{o.line}{stamp}, {o.process}"


def verdict_words(fatal: bool, failed_requests: dict[str, int], pressure_only: bool, failed: bool) -> str:
    """What the diagnosis makes of the engine, in the same words for `loadrepro diagnose` and report.md."""
    if fatal:
        return "fatal engine failure"
    if failed_requests:
        return f"failure: {sum(failed_requests.values()):,} requests failed with the engine's own error text"
    if failed:
        return "the run failed; no failure signature"
    return "pressure, not failure" if pressure_only else "no fatal signature"


def to_json(d: Diagnosis) -> str:
    data = dataclasses.asdict(d)
    data["fatal"], data["failed"], data["pressure_only"] = d.fatal, d.failed, d.pressure_only
    return json.dumps(data, indent=2)


def to_markdown(d: Diagnosis, heading: str = "#") -> str:
    read = f"{d.lines:,} lines in {len(d.files)} file(s)" if d.files else "From the run's requests"
    lines = [f"{heading} Diagnosis", "", *([] if d.files else [f"{d.no_log}.", ""]),
             f"{read}: **{verdict_words(d.fatal, d.failed_requests, d.pressure_only, d.failed)}**", ""]
    if d.initiating:
        o = d.initiating
        lines += [f"Initiating: **{o.process}** with `{o.signature}` ({_where(o)}): {o.cause}", "",
                  "```text", o.text, "```", ""]
    if d.collateral:
        lines += ["Collateral (failures that passed the first one on):", ""]
        lines += [f"- {o.process}: `{o.signature}` ({_where(o)})" for o in d.collateral] + [""]
    if d.first or d.requests:
        lines += ["| signature | class | requests (failed) | log lines | first logged | cause |",
                  "|---|---|---:|---:|---|---|"]
        for name, o in sorted(d.first.items(), key=lambda kv: (kv[1].file, kv[1].line)):
            lines.append(f"| {name} | {o.klass} | {_requests(d, name)} | {d.counts[name]} | {_where(o)} | {o.cause} |")
        classes = {s.name: s.klass.value for s in CATALOG}  # a text only requests carried: the catalog's class
        lines += [f"| {name} | {classes.get(name, '')} | {_requests(d, name)} | 0 | | |" for name in d.requests
                  if name not in d.first]
        lines.append("")
    sequence = [("start", d.start_line), ("first warning", d.first_warn.text if d.first_warn else None),
                ("the error carrying the symptom", d.initiating.text if d.initiating else None)]
    shown = [f"- {name}: `{text[:200]}`" for name, text in sequence if text]
    lines += ["Fingerprint:", "", *shown, ""] if shown else []
    if d.figures:
        lines += ["Capacity figures the engine logged: "
                  + ", ".join(f"{k} = {v:,.0f}" if v >= 10 else f"{k} = {v:g}" for k, v in d.figures.items())]
        if d.capacity:
            lines.append(f"Capacity: {d.capacity}.")
        lines.append("")
    lines += [f"Next step: {d.next_step}", ""]
    if d.verification:
        lines += [f"Verify: `{d.verification}`", ""]
    if d.context:
        shown = d.context[-EXCERPT_LINES:]
        lines += [f"The {len(shown)} lines before the first fatal line:", "", "```text", *shown, "```"]
    return "\n".join(lines).rstrip() + "\n"


def _requests(d: Diagnosis, name: str) -> str:
    return f"{d.requests.get(name, 0)} ({d.failed_requests.get(name, 0)})"


def to_text(d: Diagnosis) -> str:
    """The Markdown without the log excerpt, for a terminal."""
    text = to_markdown(dataclasses.replace(d, context=[]))
    return text.replace("**", "")


def to_info(d: Diagnosis) -> DiagnosisInfo:
    """The report's section is the diagnosis itself, read by field name (its occurrences as LogPlace rows)."""
    return DiagnosisInfo.model_validate(d, from_attributes=True)
