"""comparison.md and gate.md: what `ab`, `compare` and `compare --gate` write and print."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: every run's report writer imports this module, and a run compares nothing
    from loadrepro.compare.comparison import Comparison
    from loadrepro.compare.gate import Gate


CELL_CHARS = 90  # a comparison cell longer than this is cut at a word, and given whole below the table


def _short(text: str) -> str:
    if len(text) <= CELL_CHARS:
        return text
    cut = text[:CELL_CHARS].rsplit(" ", 1)[0].rstrip(" ,;:")
    if cut.count("`") % 2:  # a code span cut open: closed, so the rest of the row still reads
        cut += "`"
    return f"{cut} …"


def render_gate(g: Gate, baseline: str, run: str) -> str:
    """gate.md, and what `compare --gate` prints."""
    lines = [f"# loadrepro gate: {'open' if g.passed else 'CLOSED'}", "", g.detail, "",
             *([f"Noise between runs: {g.between_runs}.", ""] if g.between_runs else []),
             *([f"Change points over the history and this run: {g.change_points}.", ""] if g.change_points else []),
             f"| Figure | baseline: {baseline} | run: {run} | change | gates |", "|---|---|---|---|---|"]
    for c in g.checks:
        cells = [c.figure, c.baseline, c.run, c.change, "**closed**" if c.closed else "open"]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return "\n".join(lines) + "\n"


def render_comparison(c: Comparison) -> str:
    """comparison.md, and what `compare` and `ab` print."""
    lines = [f"# loadrepro compare: {c.conclusion}", "", c.detail, "",
             f"| Test | {c.stock_label} | {c.patched_label} | change |", "|---|---|---|---|"]
    whole = []
    for row in c.rows:
        cells = [row.test, _short(row.stock), _short(row.patched), row.change]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
        whole += [f"- {row.test} ({label}): {text}" for label, text in ((c.stock_label, row.stock),
                                                                        (c.patched_label, row.patched))
                  if len(text) > CELL_CHARS]
    return "\n".join(lines + ([""] + whole if whole else [])) + "\n"
