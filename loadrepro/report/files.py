"""How every report file reaches the disk: scrubbed of secrets, written aside, then renamed whole. Apart from the
report writers (report/write.py) so that a run's facts, written before its load, do not import them."""

from __future__ import annotations

import os
from pathlib import Path

from loadrepro.records.redact import scrub


def write_text(path: Path, content: str | bytes) -> Path:
    """Text goes through `scrub`: a report is pasted into public issues, whatever its builder let through. Written
    aside, then renamed over the old file: a reader (or a kill) never meets half a report."""
    data = content if isinstance(content, bytes) else scrub(content).encode("utf-8")
    aside = path.with_name(f".{path.name}.partial")
    aside.write_bytes(data)
    os.replace(aside, path)
    return path
