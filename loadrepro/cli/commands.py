"""The `loadrepro` command line: its commands in the order `--help` lists them, and its entry point. Flags in,
exit codes out; the work happens in the modules each command calls.

Exit codes: 0 pass, 1 the target failed, 2 usage or profile error, 3 loadrepro itself failed, 130 interrupted.
"""

from __future__ import annotations

import gc
import sys

import typer

from loadrepro.cli import load_commands as load
from loadrepro.cli import report_commands as read
from loadrepro.cli.output import internal_error, say
from loadrepro.errors import LoadreproError

# Plain help (rich_markup_mode=None): rendering it with rich costs about 0.1 s of imports per call.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Reproduce KV-cache capacity and admission failures of LLM inference servers.")


@app.callback()
def _root() -> None:
    """Reproduce KV-cache capacity and admission failures of LLM inference servers."""


for name, command in (("sim", load.sim), ("run", load.run), ("ab", load.ab), ("sweep", load.sweep_command),
                      ("stress", load.stress_command),
                      ("compare", read.compare_reports), ("bundle", read.bundle), ("report", read.report),
                      ("capacity", read.capacity_command),
                      ("diagnose", read.diagnose_command), ("probe", read.probe_command),
                      ("init", read.init_command),
                      ("shrink", load.shrink_command), ("profiles", read.list_profiles)):
    app.command(name)(command)
trace_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Traces: what one holds, and a copy of a text trace without its text.")
trace_app.command("inspect")(read.trace_inspect)
trace_app.command("anonymize")(read.trace_anonymize)
app.add_typer(trace_app, name="trace")


def main() -> None:
    """Exit codes: 0 pass, 1 the target failed, 2 usage, 3 loadrepro's own failure, 130 interrupted."""
    from loadrepro.runs.interrupts import INTERRUPTS

    with INTERRUPTS.installed():
        code = _run_app()
    sys.exit(code if isinstance(code, int) else 0)


def entry() -> None:
    """The `loadrepro` program's start (the console script, `python -m loadrepro`): `main`, then the process ends.
    Collection waits for the load (runs/heap.py). Every file is written and closed by the end, so what the command
    made is left out of the interpreter's last collection, which walked a 2,000-request run's objects for 0.15-0.2 s
    of CPU. Neither in `main`, which a Python caller may run in a process that goes on."""
    from loadrepro.runs.heap import pause_until_load

    pause_until_load()
    try:
        main()
    finally:
        gc.freeze()


def _with_ray_value(argv: list[str]) -> list[str]:
    """`--ray` without an address means a local Ray instance; click has no option with an optional value, so
    the value is filled in here."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--ray" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out[i + 1:i + 1] = ["local"]
            break
    return out


def _run_app() -> int | None:
    try:
        # standalone mode would turn Ctrl-C into exit 1, "the target failed"
        code: int | None = app(args=_with_ray_value(sys.argv[1:]), standalone_mode=False)
        return code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("loadrepro: interrupted", err=True)
        return 130
    except LoadreproError as exc:
        say(f"loadrepro: {exc}")
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - anything unexpected is loadrepro's own failure: exit 3, not 1
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()  # the command line's own usage errors (click's, which typer may vendor): exit 2
            return code
        return internal_error(exc)
