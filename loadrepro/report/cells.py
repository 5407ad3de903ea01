"""How a report's numbers and texts are written in its tables and sentences, the same in every format."""

from __future__ import annotations


def cell(text: object) -> str:
    """Text for a Markdown table's cell: its bars escaped, on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def share_exact(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def count(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
