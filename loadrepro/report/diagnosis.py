"""A Diagnosis as terminal text, Markdown and JSON (rendering only)."""

from __future__ import annotations

import dataclasses
import json

from loadrepro.judge.diagnose import Diagnosis, Occurrence
from loadrepro.schema.report_sections import DiagnosisInfo

EXCERPT_LINES = 100


def _where(o: Occurrence) -> str:
    stamp = f", {o.timestamp}" if o.timestamp else ""
    return f"{o.file}:{o.line}{stamp}, {o.process}"


def to_json(d: Diagnosis) -> str:
    data = dataclasses.asdict(d)
    data["fatal"], data["pressure_only"] = d.fatal, d.pressure_only
    return json.dumps(data, indent=2)


def to_markdown(d: Diagnosis, heading: str = "#") -> str:
    lines = [f"{heading} Diagnosis", "",
             f"{d.lines:,} lines in {len(d.files)} file(s): " + ("**fatal engine failure**" if d.fatal else
                                                                 "pressure, not failure" if d.pressure_only else
                                                                 "no fatal signature"), ""]
    if d.initiating:
        o = d.initiating
        lines += [f"Initiating: **{o.process}** with `{o.signature}` ({_where(o)}): {o.cause}", "",
                  "```text", o.text, "```", ""]
    if d.collateral:
        lines += ["Collateral (failures that passed the first one on):", ""]
        lines += [f"- {o.process}: `{o.signature}` ({_where(o)})" for o in d.collateral] + [""]
    if d.first:
        lines += ["| signature | class | count | first seen | cause |", "|---|---|---:|---|---|"]
        for name, o in sorted(d.first.items(), key=lambda kv: (kv[1].file, kv[1].line)):
            lines.append(f"| {name} | {o.klass} | {d.counts[name]} | {_where(o)} | {o.cause} |")
        lines.append("")
    sequence = [("start", d.start_line), ("first warning", d.first_warn.text if d.first_warn else None),
                ("the error carrying the symptom", d.initiating.text if d.initiating else None)]
    lines += ["Fingerprint:", ""] + [f"- {name}: `{text[:200]}`" for name, text in sequence if text] + [""]
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


def to_text(d: Diagnosis) -> str:
    """The Markdown without the log excerpt, for a terminal."""
    text = to_markdown(dataclasses.replace(d, context=[]))
    return text.replace("**", "")


def to_info(d: Diagnosis) -> DiagnosisInfo:
    """The report's section is the diagnosis itself, read by field name (its occurrences as LogPlace rows)."""
    return DiagnosisInfo.model_validate(d, from_attributes=True)
