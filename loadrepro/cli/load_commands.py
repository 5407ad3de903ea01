"""The commands that send load: `sim` (serve the simulated engine), `run`, `ab`, `sweep` and `shrink`. Each
imports what it uses when it runs: `loadrepro --help` should not pay for numpy, matplotlib, faker or the HTTP
stacks."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from loadrepro.cli.flags import with_model_options
from loadrepro.cli.output import echo, say, signalled
from loadrepro.config.options import AbArguments, RunArguments, ShrinkArguments, StressArguments, SweepArguments
from loadrepro.config.profile import SimSpec

if TYPE_CHECKING:  # imported when a command runs
    from loadrepro.schema.run_report import RunReport


def _numpy_with_one_blas_thread() -> None:
    """Import numpy with OpenBLAS held to one thread: at import it starts a spinning thread per core, 0.12 s of CPU
    in every command that sends load, and loadrepro does no linear algebra. The environment is put back at once, so
    the engines a command starts inherit the user's own; a thread count the user set is theirs to keep."""
    if "numpy" in sys.modules or _BLAS_THREADS in os.environ:
        return
    os.environ[_BLAS_THREADS] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ[_BLAS_THREADS]


_BLAS_THREADS = "OPENBLAS_NUM_THREADS"


@with_model_options(SimSpec, into="settings")
def sim(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one.")] = 8000,
    log: Annotated[Path | None, typer.Option(help="Write the engine log here instead of stderr.")] = None,
    settings: dict[str, Any] | None = None,
) -> None:
    """Serve the simulated engine (an OpenAI-compatible server with a paged KV cache) until Ctrl-C.

    Its settings are the keys of a profile's sim section; those left out take the scenario's defaults.
    """
    from loadrepro.load.target import is_loopback
    from loadrepro.runs.heap import resume
    from loadrepro.sim.config import sim_config
    from loadrepro.sim.serve import serve_forever

    resume()  # it serves until stopped: its garbage is collected as it goes
    config = sim_config(**(settings or {}))
    if not is_loopback(host):
        typer.echo(f"warning: listening on {host}, reachable from other machines", err=True)

    def ready(url: str) -> None:
        print(f"loadrepro sim: {config.scenario} ({config.policy}) serving {config.model} at {url} "
              "- Ctrl-C to stop", flush=True)

    serve_forever(config, host, port, log, ready)


@with_model_options(RunArguments, into="given")
def run(
    dry_run_: Annotated[bool, typer.Option("--dry-run", help="Plan and describe the workload; send no load.")] = False,
    given: dict[str, Any] | None = None,
) -> None:
    """Send a profile's workload to the target and judge what happened (exit 0 pass, 1 fail, 2 when not one request
    fit the target: the run tested nothing)."""
    import asyncio

    _numpy_with_one_blas_thread()
    import shlex

    from loadrepro.api import run_options
    from loadrepro.runs.dispatch import run_any
    from loadrepro.runs.run_options import process_start_ns

    args = RunArguments.of(given or {})
    options = run_options(args, command="loadrepro " + shlex.join(sys.argv[1:]), on_verdict=say_verdict)
    options = dataclasses.replace(options, began_ns=process_start_ns())
    if dry_run_:
        from loadrepro.cli.dry_run import dry_run
        from loadrepro.load.shapes import shape_words
        from loadrepro.workload.summary import format_summary

        result = asyncio.run(dry_run(options, args.model, args.out, say))
        echo(f"profile    {options.profile.name}: {options.profile.description}")
        echo(f"arrivals   {shape_words(options.profile.load)}")
        echo(format_summary(result.summary))
        if result.written:
            echo(f"written    {result.written}")
        return
    done = asyncio.run(run_any(options, say=say))
    for path in done.written:
        echo(f"report: {path}")
    if done.interrupted or signalled():
        raise typer.Exit(130)
    raise typer.Exit(done.report.exit_code)


def say_verdict(report: RunReport) -> None:
    from loadrepro.cli.summary_lines import describe_verdict

    for line in describe_verdict(report):
        echo(line)


@with_model_options(AbArguments, into="given")
def ab(given: dict[str, Any] | None = None) -> None:
    """Run the same seeded workload on a stock and a patched engine and compare; exit 0 only if the fix holds.

    Each side is a URL or an engine command; with neither, both sides are the embedded simulated engine with its
    stock and patched admission policies."""
    import asyncio

    _numpy_with_one_blas_thread()
    import shlex

    from loadrepro.api import ab_sides, run_options
    from loadrepro.compare.comparison import Conclusion
    from loadrepro.report.comparison_markdown import render_comparison
    from loadrepro.runs.dispatch import ab_any
    from loadrepro.runs.run_options import process_start_ns

    args = AbArguments.of(given or {})
    checked = ab_sides(args)
    options = run_options(args, label="ab", command="loadrepro " + shlex.join(sys.argv[1:]))
    options = dataclasses.replace(options, began_ns=process_start_ns())
    done = asyncio.run(ab_any(options, *checked, say=say))
    for label, verdict, run_dir in done.sides:
        echo(f"{label}: {verdict}  ({run_dir})")
    echo(render_comparison(done.comparison))
    for path in done.written:
        echo(f"comparison: {path}")
    if done.interrupted or signalled():
        raise typer.Exit(130)
    raise typer.Exit(0 if done.comparison.conclusion is Conclusion.FIX_CONFIRMED else 1)


@with_model_options(SweepArguments, into="given")
def sweep_command(given: dict[str, Any] | None = None) -> None:
    """One run per load level (concurrency or rate), each with its verdict, then a bisection to the breaking
    point: sweep.json/md/html with the latency-throughput curves, where the engine first fails and by which rule,
    and the most load that met the SLO. Exit 0 when the engine (patched, with --stock-cmd/--patched-cmd) held at
    every level, 1 when it failed at one."""
    import asyncio

    _numpy_with_one_blas_thread()
    import shlex

    from loadrepro.api import run_options
    from loadrepro.runs.sweeps import ladder, run_sweep

    args = SweepArguments.of(given or {})  # the same steps as loadrepro.sweep, with the command line's own say
    levels = ladder(args.over, args.values, args.ladder_from, args.ladder_to, args.factor)
    options = run_options(args, command="loadrepro " + shlex.join(sys.argv[1:]))
    sides = (((), args.stock_cmd), ((), args.patched_cmd)) if args.stock_cmd else None
    done = asyncio.run(run_sweep(options, args.over, levels, args.stop_at_failure, args.bisect, sides, say))
    echo(done.report.conclusion)
    for path in done.written:
        echo(f"sweep: {path}")
    if done.report.interrupted:
        raise typer.Exit(130)
    raise typer.Exit(0 if done.report.break_ is None else 1)


@with_model_options(StressArguments, into="given")
def stress_command(given: dict[str, Any] | None = None) -> None:
    """A battery of the traffic that breaks engines, gentle first (steady, burst, microburst, zigzag,
    ramp-recovery, connection-churn, cancel-storm, long-context, oversize, malformed, structured, agentic, ...), each
    phase a run of its own with its verdict, sized to what the target publishes: stress.json/md/html and junit.xml.
    With --engine-cmd and --label given once per build: a release matrix. Exit 0 when no phase failed, 1 when one
    did."""
    import asyncio

    _numpy_with_one_blas_thread()
    import shlex

    from loadrepro.api import run_options
    from loadrepro.stress.command import stress

    args = StressArguments.of(given or {})
    options = run_options(args.run_arguments(), command="loadrepro " + shlex.join(sys.argv[1:]))
    done = asyncio.run(stress(args, options, say))
    for line in done.conclusion:
        echo(line)
    for path in done.written:
        echo(f"stress: {path}")
    if done.interrupted or signalled():
        raise typer.Exit(130)
    raise typer.Exit(1 if done.failed else 3 if done.errors else 0)


@with_model_options(ShrinkArguments, into="given")
def shrink_command(given: dict[str, Any] | None = None) -> None:
    """Search for the smallest workload that still fails the same way (same fatal signature, else engine death,
    else first failure), on a fresh engine per trial; writes profile.toml, run/, bundle.zip and shrink.md."""
    import asyncio

    _numpy_with_one_blas_thread()

    from loadrepro.api import shrink_options
    from loadrepro.shrink.command import shrink

    options = shrink_options(ShrinkArguments.of(given or {}))
    result = asyncio.run(shrink(options, say=say))
    best, start = result.shrunk.best, result.shrunk.steps[0].trial
    echo(f"shrunk {start.requests} -> {best.requests} requests, {start.prompt_tokens:,} -> "
               f"{best.prompt_tokens:,} prompt tokens, still failing with {result.wanted}; "
               f"{result.shrunk.trials} trials in {result.shrunk.seconds:.0f} s ({result.shrunk.stopped})")
    if options.confirm_each.n > 1:
        echo(f"each candidate kept when {options.confirm_each.k} of up to {options.confirm_each.n} runs failed; the "
              f"minimal workload failed {best.failures} of {best.runs}")
    if result.confirmed is not None:
        echo(f"confirmed: {result.confirmed} of {options.confirm} more runs failed")
    for path in result.written:
        echo(f"written: {path}")
    if result.shrunk.interrupted:
        raise typer.Exit(130)
