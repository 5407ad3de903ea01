"""A stress battery's files: stress.json (StressReport), stress.md (a row per phase: verdict, the rules that failed
it, TTFT, outcomes, its report, and for a failing phase the command that shrinks it), stress.html (the same, each
phase's TTFT drawn by the browser, each row linked to the phase's report.html) and junit.xml (a test case per
phase, so CI shows which phase broke); and a release matrix's (matrix.json, matrix.md, matrix.html, junit.xml):
phases x builds, with the first phase each build failed."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path

from loadrepro.report.files import write_text
from loadrepro.report.html import html_page
from loadrepro.report.interactive import SCRIPTS, stress_section, with_scripts
from loadrepro.schema.stress_report import MatrixBuild, MatrixReport, PhaseRow, PhaseVerdict, StressReport

HEADINGS = ("phase", "verdict", "failing rules", "requests", "outcomes", "TTFT p50 ms", "TTFT p95 ms", "seconds",
            "why")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _outcomes(row: PhaseRow) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(row.outcomes.items(), key=lambda kv: -kv[1])) or "-"


def _why(row: PhaseRow) -> str:
    said = "; ".join(row.reasons[:2]) if row.verdict is not PhaseVerdict.PASS else ""
    return "; ".join(part for part in (said, row.engine or "") if part) or "-"


def _cells(row: PhaseRow) -> list[str]:
    return [row.name, row.verdict.value, ", ".join(row.rules_fired) or "-", str(row.requests) if row.run_dir else "-",
            _outcomes(row), _ms(row.ttft_p50_ms), _ms(row.ttft_p95_ms), f"{row.wall_s:.1f}" if row.run_dir else "-",
            _why(row)]


def _conclusion(r: StressReport) -> str:
    counts = {v: sum(p.verdict is v for p in r.phases) for v in PhaseVerdict}
    said = (f"{r.label}: {counts[PhaseVerdict.PASS]} passed, {counts[PhaseVerdict.FAIL]} failed, "
            f"{counts[PhaseVerdict.SKIP]} skipped in {r.wall_s:,.0f} s")
    return said + (f"; first failure: {r.first_failure}" if r.first_failure else "") + (
        " (interrupted)" if r.interrupted else "")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_stress(r: StressReport) -> str:
    lines = [f"# loadrepro stress: {r.label}", "", _conclusion(r), "", f"Target: {r.target}", ""]
    if r.target_error:
        lines += [f"**The target could not be started or reached**: {r.target_error}", ""]
    if r.capabilities is not None:
        c = r.capabilities
        lines += [f"Found: {c.flavour}; models {', '.join(c.models) or 'none listed'}; context "
                  + (f"{c.max_model_len:,} tokens" if c.max_model_len else "not published")
                  + f"; KV pool {c.kv_limits or 'not published'}; APIs {', '.join(c.apis) or 'none answered'}", ""]
    lines += ["| " + " | ".join(HEADINGS) + " |", "|" + "---|" * len(HEADINGS)]
    lines += ["| " + " | ".join(_md(cell) for cell in _cells(row)) + " |" for row in r.phases]
    failing = [row for row in r.phases if row.verdict is PhaseVerdict.FAIL]
    if failing:
        lines += ["", "## Failing phases", ""]
        for row in failing:
            lines += [f"- **{row.name}** ({row.traffic}): {'; '.join(row.reasons) or 'failed'}. Its report: "
                      f"`{row.run_dir}/report.md`; a minimal reproducer: `{row.shrink}`, then `loadrepro bundle "
                      "SHRINK_DIR/run`."]
    lines += ["", f"Reproduce: `{r.command}`; one phase alone: `--phases NAME`.", ""]
    lines += [f"- {note}" for note in r.notes]
    return "\n".join(lines).rstrip() + "\n"


def _link(row: PhaseRow, root: Path) -> str:
    if row.run_dir is None:
        return escape(row.name)
    href = Path(os.path.relpath(Path(row.run_dir) / "report.html", root)).as_posix()
    return f'<a href="{escape(href)}">{escape(row.name)}</a>'


def _html_table(r: StressReport, root: Path) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in HEADINGS)
    rows = []
    for row in r.phases:
        cells = _cells(row)
        shown = [_link(row, root), *(escape(c) for c in cells[1:])]
        rows.append(f"<tr class={row.verdict.value}>" + "".join(f"<td>{c}</td>" for c in shown) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def render_stress_html(r: StressReport, root: Path) -> str:
    body = [f"<h1>loadrepro stress: {escape(r.label)}</h1><p>{escape(_conclusion(r))}</p>",
            f"<p>Target: {escape(r.target)}</p>", _html_table(r, root),
            f"<figure>{stress_section(r.phases)}<figcaption>Each phase's time to first token, p50 and p95; a cross "
            "marks a phase that failed, a skipped phase has none.</figcaption></figure>"]
    failing = [row for row in r.phases if row.verdict is PhaseVerdict.FAIL]
    if failing:
        body.append("<h2>Failing phases</h2><ul>" + "".join(
            f"<li><b>{escape(row.name)}</b>: {escape('; '.join(row.reasons) or 'failed')}. A minimal reproducer: "
            f"<code>{escape(row.shrink or '')}</code></li>" for row in failing) + "</ul>")
    if r.notes:
        body.append("<ul>" + "".join(f"<li>{escape(n)}</li>" for n in r.notes) + "</ul>")
    body.append(f"<p>Reproduce: <code>{escape(r.command)}</code></p>" + SCRIPTS)
    return html_page(f"loadrepro stress: {r.label}", "\n".join(body))


def _case(suite: ET.Element, suite_name: str, row: PhaseRow) -> None:
    case = ET.SubElement(suite, "testcase", classname=suite_name, name=row.name, time=f"{row.wall_s:.3f}")
    if row.verdict is PhaseVerdict.FAIL:
        detail = "; ".join(row.reasons) or "failed"
        ET.SubElement(case, "failure", message=detail, type="loadrepro.phase").text = (
            f"{detail}\nrules: {', '.join(row.rules_fired)}\nreport: {row.run_dir}/report.md\nshrink: {row.shrink}")
    elif row.verdict is PhaseVerdict.SKIP:
        ET.SubElement(case, "skipped", message=row.reasons[0] if row.reasons else "skipped")


def _suite(parent: ET.Element, name: str, rows: list[PhaseRow], wall_s: float) -> None:
    failures = sum(p.verdict is PhaseVerdict.FAIL for p in rows)
    skipped = sum(p.verdict is PhaseVerdict.SKIP for p in rows)
    suite = ET.SubElement(parent, "testsuite", name=name, tests=str(len(rows)), failures=str(failures), errors="0",
                          skipped=str(skipped), time=f"{wall_s:.3f}")
    for row in rows:
        _case(suite, name, row)


def render_junit(batteries: list[StressReport]) -> str:
    """A test suite per battery (a build of a matrix), a test case per phase."""
    rows = [p for r in batteries for p in r.phases]
    suites = ET.Element("testsuites", name="loadrepro.stress", tests=str(len(rows)),
                        failures=str(sum(p.verdict is PhaseVerdict.FAIL for p in rows)), errors="0",
                        time=f"{sum(r.wall_s for r in batteries):.3f}")
    for r in batteries:
        _suite(suites, f"loadrepro.stress.{r.label}", r.phases, r.wall_s)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_stress(r: StressReport, out: Path) -> list[Path]:
    """stress.json, stress.md, stress.html and junit.xml in `out`."""
    return [write_text(out / "stress.json", r.model_dump_json(indent=2, by_alias=True) + "\n"),
            write_text(out / "stress.md", render_stress(r)),
            write_text(out / "stress.html", with_scripts(render_stress_html(r, out))),
            write_text(out / "junit.xml", render_junit([r]))]


def _matrix_cell(m: MatrixReport, label: str, phase: str) -> str:
    build = next(b for b in m.builds if b.label == label)
    verdict = build.verdicts.get(phase)
    if verdict is None:
        return "-"
    rules = build.rules.get(phase, [])
    return verdict.value + (f" ({', '.join(rules)})" if rules else "")


def _first(b: MatrixBuild) -> str:
    return f"did not start ({b.target_error})" if b.target_error else b.first_failure or "none"


def render_matrix(m: MatrixReport) -> str:
    labels = [b.label for b in m.builds]
    lines = ["# loadrepro stress matrix", "", "| phase | " + " | ".join(_md(x) for x in labels) + " |",
             "|" + "---|" * (len(labels) + 1)]
    lines += ["| " + " | ".join([phase, *(_md(_matrix_cell(m, x, phase)) for x in labels)]) + " |"
              for phase in m.phases]
    lines += ["| first failure | " + " | ".join(_first(b) for b in m.builds) + " |",
              "| seconds | " + " | ".join(f"{b.wall_s:,.0f}" for b in m.builds) + " |", ""]
    lines += [f"- {b.label}: `{b.engine_cmd}` ({b.stress_dir}/stress.md)" for b in m.builds]
    lines += ["", f"Reproduce: `{m.command}`" + (" (interrupted: the builds after are missing)"
                                                 if m.interrupted else ""), ""]
    return "\n".join(lines)


def render_matrix_html(m: MatrixReport, root: Path) -> str:
    head = "<th>phase</th>" + "".join(
        f'<th><a href="{escape(Path(os.path.relpath(Path(b.stress_dir) / "stress.html", root)).as_posix())}">'
        f"{escape(b.label)}</a></th>" for b in m.builds)
    rows = "".join("<tr><td>" + escape(phase) + "</td>" + "".join(
        f"<td class={escape(b.verdicts[phase].value if phase in b.verdicts else 'none')}>"
        f"{escape(_matrix_cell(m, b.label, phase))}</td>" for b in m.builds) + "</tr>" for phase in m.phases)
    first = "<tr><td>first failure</td>" + "".join(f"<td>{escape(_first(b))}</td>"
                                                   for b in m.builds) + "</tr>"
    body = (f"<h1>loadrepro stress matrix</h1><table><tr>{head}</tr>{rows}{first}</table>"
            + "<ul>" + "".join(f"<li>{escape(b.label)}: <code>{escape(b.engine_cmd)}</code></li>"
                               for b in m.builds) + f"</ul><p>Reproduce: <code>{escape(m.command)}</code></p>")
    return html_page("loadrepro stress matrix", body)


def write_matrix(m: MatrixReport, batteries: list[StressReport], out: Path) -> list[Path]:
    """matrix.json, matrix.md, matrix.html and junit.xml (every build's phases) in `out`."""
    return [write_text(out / "matrix.json", m.model_dump_json(indent=2, by_alias=True) + "\n"),
            write_text(out / "matrix.md", render_matrix(m)),
            write_text(out / "matrix.html", with_scripts(render_matrix_html(m, out))),
            write_text(out / "junit.xml", render_junit(batteries))]
