"""What the command line says: its output on stdout, its progress and errors on stderr (without secrets), and
what it knows of a signal that came while a command ran."""

from __future__ import annotations

import sys
from pathlib import Path

import typer


def echo(text: str) -> None:
    """Output on stdout. A reader that went away (`loadrepro ... | head`) ends the output, not the command: its exit
    code must still say what happened (typer would turn the broken pipe into exit 1, "the target failed")."""
    from loadrepro.runs.streams import written

    written(lambda: typer.echo(text), sys.stdout)


def say(text: str) -> None:
    """Progress and errors on stderr, without the secrets an engine command or a URL may carry; a reader of stderr
    that went away ends them, not the command (echo)."""
    from loadrepro.records.redact import scrub
    from loadrepro.runs.streams import written

    written(lambda: typer.echo(scrub(text), err=True), sys.stderr)


def internal_error(exc: Exception) -> int:
    """One line on stderr; the traceback in a file, since loadrepro's own bug is not the target's failure."""
    import os
    import tempfile

    from loadrepro.errors import InternalError, keep_traceback

    trace = keep_traceback(exc, Path(tempfile.gettempdir()) / f"loadrepro-traceback-{os.getpid()}.txt")
    say(f"loadrepro: internal error ({type(exc).__name__}: {exc}); the traceback is in {trace}")
    return InternalError.exit_code


def signalled() -> bool:
    """Ctrl-C or SIGTERM came while the command ran, though what it stopped (checking answers after the load)
    still let it finish its reports: the command exits 130 all the same."""
    from loadrepro.runs.interrupts import INTERRUPTS

    return INTERRUPTS.received is not None
