"""The `loadrepro` command line: flags in, exit codes out; the work happens in the modules it calls.

Exit codes: 0 pass, 1 the target failed, 2 usage or profile error, 3 loadrepro itself failed.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from loadrepro.cli.flags import with_model_options
from loadrepro.config.defaults import API_KEY_ENV
from loadrepro.config.options import AbArguments, RunArguments, ShrinkArguments, SweepArguments
from loadrepro.config.profile import EngineSpec, SimSpec
from loadrepro.errors import LoadreproError, UsageError

if TYPE_CHECKING:  # imported when a command runs (see below)
    from loadrepro.schema.run_report import RunReport

# Each command imports what it uses when it runs: `loadrepro --help` should not pay for numpy, matplotlib, faker
# or the HTTP stacks (about a second), only for typer and the profile model the `sim` flags are made from.

# Plain help (rich_markup_mode=None): rendering it with rich costs about 0.1 s of imports per call.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Reproduce KV-cache capacity and admission failures of LLM inference servers.")


@app.callback()
def _root() -> None:
    """Reproduce KV-cache capacity and admission failures of LLM inference servers."""


@app.command()
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
    from loadrepro.sim.config import sim_config
    from loadrepro.sim.serve import serve_forever

    config = sim_config(**(settings or {}))
    if not is_loopback(host):
        typer.echo(f"warning: listening on {host}, reachable from other machines", err=True)

    def ready(url: str) -> None:
        print(f"loadrepro sim: {config.scenario} ({config.policy}) serving {config.model} at {url} "
              "- Ctrl-C to stop", flush=True)

    serve_forever(config, host, port, log, ready)


@app.command()
@with_model_options(RunArguments, into="given")
def run(
    dry_run_: Annotated[bool, typer.Option("--dry-run", help="Plan and describe the workload; send no load.")] = False,
    given: dict[str, Any] | None = None,
) -> None:
    """Send a profile's workload to the target and judge what happened (exit 0 pass, 1 fail)."""
    import asyncio
    import shlex

    from loadrepro.api import run_options
    from loadrepro.runs.dispatch import run_any
    from loadrepro.runs.reporting import process_start_ns

    args = RunArguments.of(given or {})
    options = run_options(args, command="loadrepro " + shlex.join(sys.argv[1:]), on_verdict=_say_verdict)
    options = dataclasses.replace(options, began_ns=process_start_ns())
    if dry_run_:
        from loadrepro.cli.dry_run import dry_run
        from loadrepro.workload.summary import format_summary

        result = asyncio.run(dry_run(options.profile, options.base_url, args.model, args.out, options.tokenizer,
                                     options.api_key, _say))
        _echo(f"profile    {options.profile.name}: {options.profile.description}")
        _echo(format_summary(result.summary))
        if result.written:
            _echo(f"written    {result.written}")
        return
    done = asyncio.run(run_any(options, say=_say))
    for path in done.written:
        _echo(f"report: {path}")
    if done.interrupted or _signalled():
        raise typer.Exit(130)
    raise typer.Exit(0 if done.report.passed else 1)


def _say_verdict(report: RunReport) -> None:
    from loadrepro.cli.summary_lines import describe_verdict

    for line in describe_verdict(report):
        _echo(line)


@app.command()
@with_model_options(AbArguments, into="given")
def ab(given: dict[str, Any] | None = None) -> None:
    """Run the same seeded workload on a stock and a patched engine and compare; exit 0 only if the fix holds.

    Each side is a URL or an engine command; with neither, both sides are the embedded simulated engine with its
    stock and patched admission policies."""
    import asyncio
    import shlex

    from loadrepro.api import ab_sides, run_options
    from loadrepro.compare.comparison import Conclusion
    from loadrepro.report.markdown import render_comparison
    from loadrepro.runs.dispatch import ab_any
    from loadrepro.runs.reporting import process_start_ns

    args = AbArguments.of(given or {})
    checked = ab_sides(args)
    options = run_options(args, label="ab", command="loadrepro " + shlex.join(sys.argv[1:]))
    options = dataclasses.replace(options, began_ns=process_start_ns())
    done = asyncio.run(ab_any(options, *checked, say=_say))
    for label, verdict, run_dir in done.sides:
        _echo(f"{label}: {verdict}  ({run_dir})")
    _echo(render_comparison(done.comparison))
    for path in done.written:
        _echo(f"comparison: {path}")
    if done.interrupted or _signalled():
        raise typer.Exit(130)
    raise typer.Exit(0 if done.comparison.conclusion is Conclusion.FIX_CONFIRMED else 1)


@app.command("sweep")
@with_model_options(SweepArguments, into="given")
def sweep_command(given: dict[str, Any] | None = None) -> None:
    """One run per load level (concurrency or rate), each with its verdict, then a bisection to the breaking
    point: sweep.json/md/html with the latency-throughput curves, where the engine first fails and by which rule,
    and the most load that met the SLO. Exit 0 when the engine (patched, with --stock-cmd/--patched-cmd) held at
    every level, 1 when it failed at one."""
    import asyncio
    import shlex

    from loadrepro.api import run_options
    from loadrepro.runs.sweeps import ladder, run_sweep

    args = SweepArguments.of(given or {})  # the same steps as loadrepro.sweep, with the command line's own say
    levels = ladder(args.over, args.values, args.ladder_from, args.ladder_to, args.factor)
    options = run_options(args, command="loadrepro " + shlex.join(sys.argv[1:]))
    sides = (((), args.stock_cmd), ((), args.patched_cmd)) if args.stock_cmd else None
    done = asyncio.run(run_sweep(options, args.over, levels, args.stop_at_failure, args.bisect, sides, _say))
    _echo(done.report.conclusion)
    for path in done.written:
        _echo(f"sweep: {path}")
    if done.report.interrupted:
        raise typer.Exit(130)
    raise typer.Exit(0 if done.report.break_ is None else 1)


@app.command("compare")
def compare_reports(
    report_a: Annotated[Path, typer.Argument(help="The stock run (the baseline, with --gate): report.json or its run "
                                                  "directory.")],
    report_b: Annotated[Path, typer.Argument(help="The patched run (the run gated, with --gate): report.json or its "
                                                  "run directory.")],
    out: Annotated[Path | None, typer.Option(help="Write compare.md and compare.json here (gate.md and gate.json "
                                                  "with --gate).")] = None,
    alpha: Annotated[float, typer.Option(help="Two sets of trials: the p below which a fix is shown.")] = 0.05,
    gate: Annotated[bool, typer.Option("--gate", help="A regression gate: exit 1 when the second run is "
                                                      "significantly worse than the first (TTFT p50/p95, ITL p50, "
                                                      "decode tokens/s, SLO attainment) by more than --tolerance, or "
                                                      "a rule fails in it that did not in the first; else 0.")] = False,
    tolerance: Annotated[float, typer.Option(min=0, help="With --gate: a change smaller than this share of the "
                                                         "baseline's value never closes the gate.")] = 0.05,
) -> None:
    """Compare two runs (or two sets of --trials) side by side; exit 0 only if the second confirms a fix for the
    first's failure. With --gate: exit 0 unless the second regressed against the first."""
    from loadrepro.report.json import read_report

    first, second = read_report(report_a), read_report(report_b)
    if gate:
        _gate(first, second, tolerance, out)
    from loadrepro.compare.comparison import Conclusion
    from loadrepro.config.profile import VerdictSpec
    from loadrepro.report.markdown import render_comparison
    from loadrepro.report.timeline import timeline_from_run_dir
    from loadrepro.report.write import write_comparison
    from loadrepro.runs.repeats import compare_runs

    spec = VerdictSpec.model_validate(second.profile.get("verdict", {}))
    comparison = compare_runs(first, second, spec, alpha)
    _echo(render_comparison(comparison))
    if out is not None:
        dirs = [path if path.is_dir() else path.parent for path in (report_a, report_b)]
        timelines = [timeline_from_run_dir(d, r) for d, r in zip(dirs, (first, second), strict=True)]
        for path in write_comparison(comparison, out, [t for t in timelines if t is not None] or None):
            _echo(f"comparison: {path}")
    raise typer.Exit(0 if comparison.conclusion is Conclusion.FIX_CONFIRMED else 1)


def _gate(baseline: RunReport, run: RunReport, tolerance: float, out: Path | None) -> NoReturn:
    from loadrepro.report.markdown import render_gate
    from loadrepro.report.write import write_gate
    from loadrepro.runs.repeats import gate_runs

    result = gate_runs(baseline, run, tolerance)
    _echo(render_gate(result, baseline.label, run.label))
    if out is not None:
        for path in write_gate(result, out, baseline.label, run.label):
            _echo(f"gate: {path}")
    raise typer.Exit(0 if result.passed else 1)


@app.command()
def bundle(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (it holds report.json).")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="The zip to write.")] = None,
    redact_host: Annotated[bool, typer.Option(help="Replace host names and IP addresses.")] = False,
) -> None:
    """Pack a run into one zip a maintainer can replay without loadrepro (python3 replay.py --base-url URL)."""
    from loadrepro.report.bundle import make_bundle

    path = make_bundle(run_dir, output, redact_host)
    _echo(f"bundle: {path} ({path.stat().st_size / 1e6:.2f} MB)")


@app.command("capacity")
@with_model_options(EngineSpec, into="engine", flags={"gpu_memory_bytes": "gpu-memory", "weights_bytes": "weights"},
                    defaults={"tokens_per_block": 32, "max_seq_len": 8192})
def capacity_command(
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    engine: dict[str, Any] | None = None,
) -> None:
    """KV-cache arithmetic: bytes per token, pool capacity, blocks needed, page-index width, and a verdict."""
    from loadrepro.cli.summary_lines import describe_capacity
    from loadrepro.config.capacity import capacity
    from loadrepro.load.limits import kv_config

    kv = kv_config(EngineSpec(**(engine or {})))
    if kv is None:
        raise UsageError("give --bytes-per-token or --layers/--kv-heads/--head-dim, and --pool-bytes, --pool-blocks "
                         "or --gpu-memory")
    for line in describe_capacity(kv, capacity(kv), as_json=json_):
        _echo(line)


@app.command("diagnose")
def diagnose_command(
    paths: Annotated[list[Path], typer.Argument(help="Engine logs (one per rank), or one run directory.")],
    md: Annotated[bool, typer.Option("--md", help="Markdown, with the 100 lines before the first fatal one.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON.")] = False,
) -> None:
    """Find the first failure signatures in engine logs, the initiating rank and the collateral ones, the capacity
    figures the engine logged, and the next step. Exit 0: no fatal signature; 1: fatal found; 2: unreadable."""
    from loadrepro.judge.diagnose import diagnose, logs_of
    from loadrepro.report.diagnosis import to_json, to_markdown, to_text

    if len(paths) == 1 and paths[0].is_dir():
        logs, verification = logs_of(paths[0])
    else:
        logs = []
        for path in paths:
            logs += logs_of(path)[0]
        verification = logs_of(paths[0])[1]
    result = diagnose(logs, verification=verification)
    _echo(to_json(result) if json_ else to_markdown(result) if md else to_text(result))
    raise typer.Exit(1 if result.fatal else 0)


@app.command("probe")
def probe_command(
    base_url: Annotated[str, typer.Option(help="The engine's OpenAI-compatible URL.")],
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    health_path: Annotated[str, typer.Option(help="Where the engine answers health checks.")] = "/health",
    metrics_path: Annotated[str, typer.Option(help="Where the engine publishes metrics.")] = "/metrics",
    api_key_env: Annotated[str, typer.Option(help="Environment variable holding the API key.")] = API_KEY_ENV,
    target_is_isolated: Annotated[bool, typer.Option(
        help="Confirm a non-loopback target is an isolated test engine.")] = False,
) -> None:
    """What loadrepro can see of an engine before a run: models, token counting, health, metrics, streamed usage
    and cached tokens, which engine it is, and what a run will therefore judge. Sends two one-token requests."""
    import asyncio
    import os

    from loadrepro.cli.summary_lines import describe_probe
    from loadrepro.load.probe import probe
    from loadrepro.load.target import check_base_url

    url = check_base_url(base_url, target_is_isolated)
    key = os.environ.get(api_key_env)
    result = asyncio.run(probe(url, health_path, metrics_path, key or None))
    _echo(result.model_dump_json(indent=2) if json_ else "\n".join(describe_probe(result)))


@app.command("shrink")
@with_model_options(ShrinkArguments, into="given")
def shrink_command(given: dict[str, Any] | None = None) -> None:
    """Search for the smallest workload that still fails the same way (same fatal signature, else engine death,
    else first failure), on a fresh engine per trial; writes profile.toml, run/, bundle.zip and shrink.md."""
    import asyncio

    from loadrepro.api import shrink_options
    from loadrepro.shrink.command import shrink

    options = shrink_options(ShrinkArguments.of(given or {}))
    result = asyncio.run(shrink(options, say=_say))
    best, start = result.shrunk.best, result.shrunk.steps[0].trial
    _echo(f"shrunk {start.requests} -> {best.requests} requests, {start.prompt_tokens:,} -> "
               f"{best.prompt_tokens:,} prompt tokens, still failing with {result.wanted}; "
               f"{result.shrunk.trials} trials in {result.shrunk.seconds:.0f} s ({result.shrunk.stopped})")
    if options.confirm_each.n > 1:
        _echo(f"each candidate kept when {options.confirm_each.k} of up to {options.confirm_each.n} runs failed; the "
              f"minimal workload failed {best.failures} of {best.runs}")
    if result.confirmed is not None:
        _echo(f"confirmed: {result.confirmed} of {options.confirm} more runs failed")
    for path in result.written:
        _echo(f"written: {path}")
    if result.shrunk.interrupted:
        raise typer.Exit(130)


trace_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Traces: what one holds, and a copy of a text trace without its text.")
app.add_typer(trace_app, name="trace")
TraceFormatOption = Annotated[str, typer.Option(
    "--format", help="auto (from the content), mooncake, bailian, azure, burstgpt, sharegpt or openai-log.")]
TokenizerOption = Annotated[Path | None, typer.Option(
    help="Count in this local Hugging Face tokenizer's tokens (tokenizer.json or its folder), chat template "
         "applied.")]
TraceUrlOption = Annotated[str | None, typer.Option(
    help="Count with this engine's tokenize endpoint (vLLM, llama.cpp), chat template applied; it generates "
         "nothing, so its prefix cache is not touched.")]


@trace_app.command("inspect")
def trace_inspect(
    file: Annotated[Path, typer.Argument(help="The trace file.")],
    format_: TraceFormatOption = "auto",
    block_tokens: Annotated[int, typer.Option(
        min=0, help="Tokens per hash id; 0: the format's own (mooncake 512, bailian 16).")] = 0,
    tokenizer: TokenizerOption = None,
    base_url: TraceUrlOption = None,
    api_key_env: Annotated[str, typer.Option(help="Environment variable holding the API key.")] = API_KEY_ENV,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Requests, sessions, span, arrival rate, input and output p50/p95/max, and the prompt tokens a perfect prefix
    cache could serve. Text traces are counted in the simulated engine's tokens unless --tokenizer or --base-url."""
    import asyncio
    import os

    from loadrepro.cli.trace_commands import inspect_command
    from loadrepro.workload.trace_stats import describe_stats

    stats = asyncio.run(inspect_command(file, format_, block_tokens, tokenizer, base_url,
                                        os.environ.get(api_key_env) or None))
    _echo(stats.model_dump_json(indent=2) if json_ else "\n".join(describe_stats(stats)))


@trace_app.command("anonymize")
def trace_anonymize(
    file: Annotated[Path, typer.Argument(help="A text trace: an OpenAI request log or ShareGPT conversations.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="The Mooncake-format trace to write.")],
    format_: TraceFormatOption = "auto",
    block_tokens: Annotated[int, typer.Option(min=1, help="Tokens per hash id block.")] = 512,
    tokenizer: TokenizerOption = None,
    base_url: TraceUrlOption = None,
    model: Annotated[str | None, typer.Option(help="With --base-url: the model (default: the first listed).")] = None,
    api_key_env: Annotated[str, typer.Option(help="Environment variable holding the API key.")] = API_KEY_ENV,
    target_is_isolated: Annotated[bool, typer.Option(
        help="Confirm a non-loopback --base-url is an isolated test engine.")] = False,
) -> None:
    """Write a Mooncake-format trace (session_id, timestamp, input_length, output_length, hash_ids) that keeps the
    lengths, sessions, timing and shared prefixes of a text trace and none of its words: block ids are keyed hashes
    of the prompt's tokens, numbered, with the key thrown away. Replay it with kind = "trace" and
    trace_block_tokens set to --block-tokens."""
    import asyncio
    import os

    from loadrepro.cli.trace_commands import anonymize_command

    done = asyncio.run(anonymize_command(file, output, format_, block_tokens, tokenizer, base_url,
                                         os.environ.get(api_key_env) or None, model, target_is_isolated,
                                         lambda n: _say(f"{n:,} requests written")))
    _echo(f"written    {done.output}: {done.requests:,} requests in {done.sessions:,} sessions, {done.blocks:,} "
          f"distinct blocks of {done.block_tokens} tokens ({done.trace_format} in, lengths counted with "
          f"{done.tokenizer})")
    if done.skipped.total:
        _echo(f"left out   {done.skipped.describe()}")
    _echo(f"replay     --set workload.kind='\"trace\"' --set workload.trace='\"{done.output}\"' "
          f"--set workload.trace_block_tokens={done.block_tokens}")


@app.command("profiles")
def list_profiles() -> None:
    """List the built-in profiles with their descriptions."""
    from loadrepro.config.profile import builtin_profiles, load_profile

    for name in builtin_profiles():
        _echo(f"{name:22} {load_profile(name).description}")


def _echo(text: str) -> None:
    """Output on stdout. A reader that went away (`loadrepro ... | head`) ends the output, not the command: its exit
    code must still say what happened (typer would turn the broken pipe into exit 1, "the target failed")."""
    import os

    try:
        typer.echo(text)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # later writes and the final flush go nowhere


def _say(text: str) -> None:
    """Progress and errors on stderr, without the secrets an engine command or a URL may carry."""
    from loadrepro.records.redact import scrub

    typer.echo(scrub(text), err=True)


def _internal_error(exc: Exception) -> int:
    """One line on stderr; the traceback in a file, since loadrepro's own bug is not the target's failure."""
    import os
    import tempfile

    from loadrepro.errors import InternalError, keep_traceback

    trace = keep_traceback(exc, Path(tempfile.gettempdir()) / f"loadrepro-traceback-{os.getpid()}.txt")
    _say(f"loadrepro: internal error ({type(exc).__name__}: {exc}); the traceback is in {trace}")
    return InternalError.exit_code


def _signalled() -> bool:
    """Ctrl-C or SIGTERM came while the command ran, though what it stopped (checking answers after the load)
    still let it finish its reports: the command exits 130 all the same."""
    from loadrepro.runs.interrupts import INTERRUPTS

    return INTERRUPTS.received is not None


def main() -> None:
    """Exit codes: 0 pass, 1 the target failed, 2 usage, 3 loadrepro's own failure, 130 interrupted."""
    from loadrepro.runs.interrupts import INTERRUPTS

    with INTERRUPTS.installed():
        code = _run_app()
    sys.exit(code if isinstance(code, int) else 0)


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
        _say(f"loadrepro: {exc}")
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - anything unexpected is loadrepro's own failure: exit 3, not 1
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()  # the command line's own usage errors (click's, which typer may vendor): exit 2
            return code
        return _internal_error(exc)
