"""A sweep's files: sweep.json (SweepReport), sweep.md (each level's figures, where each engine broke) and
sweep.html (the same with the curves drawn by the browser: output tokens/s, TTFT and ITL against load, goodput, the
failed levels marked), with sweep.png beside them when asked (--png)."""

from __future__ import annotations

from html import escape
from pathlib import Path

from loadrepro.report.files import write_text
from loadrepro.report.html import html_page, html_table, img
from loadrepro.report.interactive import SCRIPTS, sweep_section, with_scripts
from loadrepro.schema.sweep_report import SweepCurve, SweepLevel, SweepReport

HEADINGS = ("level", "verdict", "failing rules", "requests/s", "output tokens/s", "TTFT p50 ms", "TTFT p95 ms",
            "ITL p50 ms", "SLO met", "goodput req/s", "note")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _row(level: SweepLevel) -> list[str]:
    slo = level.slo
    return [f"{level.value:g}" + (" (bisected)" if level.bisected else ""), level.verdict,
            ", ".join(level.rules_fired) or "-", f"{level.throughput.requests_per_s:,.2f}",
            f"{level.throughput.output_tokens_per_s:,.1f}", _ms(level.latency.ttft_ms.p50),
            _ms(level.latency.ttft_ms.p95), _ms(level.latency.itl_ms.p50),
            "-" if slo is None or slo.attainment is None else f"{slo.attainment:.1%}",
            "-" if slo is None else f"{slo.goodput_requests_per_s:,.2f}",
            "client-bound" if level.client_bound else ""]


def _facts(r: SweepReport, c: SweepCurve) -> list[str]:
    unit = "requests in flight" if r.over == "concurrency" else "requests/s"
    said = [f"breaking point: first failed at {c.break_.first_fail:g} {unit} ({c.break_.rule})"
            + (f"; {c.break_.last_pass:g} passed" if c.break_.last_pass is not None else "; its lowest level")
            if c.break_ else "held at every level"]
    if c.slo_capacity is not None:
        said.append(f"the most load that met the SLO: {c.slo_capacity:g} {unit}")
    said += [f"level {lv.value:g}: {lv.client_bound}" for lv in c.levels if lv.client_bound]
    return said


def render_sweep(r: SweepReport) -> str:
    lines = [f"# loadrepro sweep: {r.profile} over {r.over}", "", r.conclusion, "",
             f"Reproduce: `{r.command}`" + ("" if r.fresh_engine else " (the same target at every level)"), ""]
    for c in r.curves():
        lines += [f"## {c.label}", "", *(f"- {fact}" for fact in _facts(r, c)), "",
                  "| " + " | ".join(HEADINGS) + " |", "|" + "---|" * len(HEADINGS)]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in _row(lv)) + " |" for lv in c.levels]
        lines.append("")
    lines += [f"- {note}" for note in r.notes]
    return "\n".join(lines).rstrip() + "\n"


def render_sweep_html(r: SweepReport, picture: str = "") -> str:
    """The curves drawn by the browser (with `picture`, the PNG of them below)."""
    body = [f"<h1>loadrepro sweep: {escape(r.profile)} over {escape(r.over)}</h1><p>{escape(r.conclusion)}</p>",
            f"<figure>{sweep_section(r.curves(), r.over)}{picture}<figcaption>Each level's run: output tokens/s, "
            "TTFT p50 and p95, ITL p50 and goodput against the load; a cross marks a level where the engine failed "
            "(a rule other than slo).</figcaption></figure>"]
    for c in r.curves():
        body.append(f"<h2>{escape(c.label)}</h2><ul>" + "".join(f"<li>{escape(f)}</li>" for f in _facts(r, c))
                    + "</ul>" + html_table(list(HEADINGS), [list(_row(lv)) for lv in c.levels]))
    if r.notes:
        body.append("<ul>" + "".join(f"<li>{escape(n)}</li>" for n in r.notes) + "</ul>")
    body.append(f"<p>Reproduce: <code>{escape(r.command)}</code></p>" + SCRIPTS)
    return html_page(f"loadrepro sweep: {r.profile}", "\n".join(body))


def write_sweep(r: SweepReport, out: Path, png: bool = False) -> list[Path]:
    """sweep.json, sweep.md and sweep.html in `out`; with `png`, sweep.png too."""
    written = [write_text(out / "sweep.json", r.model_dump_json(indent=2, by_alias=True) + "\n"),
               write_text(out / "sweep.md", render_sweep(r))]
    picture = ""
    if png:
        from loadrepro.report import plots  # matplotlib, for the one picture

        drawn = plots.png(plots.sweep_figure(r.curves(), r.over))
        written.append(write_text(out / "sweep.png", drawn))
        picture = img(drawn, "sweep")
    return [*written, write_text(out / "sweep.html", with_scripts(render_sweep_html(r, picture)))]
