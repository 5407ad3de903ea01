"""The commands that read what runs, engines and traces left: `compare` (and its gate), `bundle`, `capacity`,
`diagnose`, `probe`, `profiles`, and `trace inspect` and `trace anonymize`. Each imports what it uses when it
runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from loadrepro.cli.flags import with_model_options
from loadrepro.cli.output import echo, say
from loadrepro.config.defaults import API_KEY_ENV
from loadrepro.config.profile import EngineSpec
from loadrepro.errors import UsageError

if TYPE_CHECKING:  # imported when a command runs
    from loadrepro.schema.run_report import RunReport
    from loadrepro.schema.stress_report import MatrixReport, StressReport


def compare_reports(
    report_a: Annotated[Path, typer.Argument(help="The stock run (the baseline, with --gate): report.json or its run "
                                                  "directory; with --gate also a stress battery's stress.json or a "
                                                  "matrix.json, or the directory that holds it.")],
    report_b: Annotated[Path, typer.Argument(help="The patched run (the run gated, with --gate): report.json or its "
                                                  "run directory; or, with --gate, the same kind of stress file as "
                                                  "the first.")],
    out: Annotated[Path | None, typer.Option(help="Write compare.md and compare.json here (gate.md and gate.json "
                                                  "with --gate).")] = None,
    alpha: Annotated[float, typer.Option(help="Two sets of trials: the p below which a fix is shown.")] = 0.05,
    gate: Annotated[bool, typer.Option("--gate", help="A regression gate: exit 1 when the second run is "
                                                      "significantly worse than the first (TTFT p50/p95, ITL p50, "
                                                      "decode tokens/s, SLO attainment) by more than --tolerance, or "
                                                      "a rule fails in it that did not in the first; else 0. Two "
                                                      "stress batteries: exit 1 when a phase that passed in the "
                                                      "first fails in the second (two matrices: build by build).")
                                        ] = False,
    tolerance: Annotated[float, typer.Option(min=0, help="With --gate: a change smaller than this share of the "
                                                         "baseline's value never closes the gate.")] = 0.05,
    history: Annotated[Path | None, typer.Option(help="With --gate: a directory of earlier runs of the workload "
                                                      "(every report.json below it; a nightly job's earlier "
                                                      "nights), whose spread is the noise between two runs of one "
                                                      "engine, and in which, with the second run, a change point "
                                                      "that leaves it worse closes the gate.")] = None,
) -> None:
    """Compare two runs (or two sets of --trials) side by side; exit 0 only if the second confirms a fix for the
    first's failure. With --gate: exit 0 unless the second regressed against the first."""
    from loadrepro.report.json import read_battery, read_report

    batteries = read_battery(report_a), read_battery(report_b)
    if any(b is not None for b in batteries):
        _gate_batteries((report_a, report_b), batteries, gate, history, tolerance, out)
    if history is not None and (not gate or not history.is_dir()):
        raise UsageError(f"--history {history}: " + ("not a directory of earlier runs" if gate else
                                                      "only --gate reads a history"))
    first, second = read_report(report_a), read_report(report_b)
    dirs = (_run_dir(report_a), _run_dir(report_b))
    if gate:
        _gate(first, second, tolerance, out, dirs, history)
    from loadrepro.compare.comparison import Conclusion
    from loadrepro.config.profile import VerdictSpec
    from loadrepro.report.comparison_markdown import render_comparison
    from loadrepro.report.timeline import timeline_from_run_dir
    from loadrepro.report.write import write_comparison
    from loadrepro.runs.repeats import compare_runs

    spec = VerdictSpec.model_validate(second.profile.get("verdict", {}))
    comparison = compare_runs(first, second, spec, alpha, dirs)
    echo(render_comparison(comparison))
    if out is not None:
        timelines = [timeline_from_run_dir(d, r) for d, r in zip(dirs, (first, second), strict=True)]
        for path in write_comparison(comparison, out, [t for t in timelines if t is not None] or None):
            echo(f"comparison: {path}")
    raise typer.Exit(0 if comparison.conclusion is Conclusion.FIX_CONFIRMED else 1)


def _run_dir(path: Path) -> Path:
    return path if path.is_dir() else path.parent


def _gate(baseline: RunReport, run: RunReport, tolerance: float, out: Path | None, dirs: tuple[Path, Path],
          history: Path | None) -> NoReturn:
    from loadrepro.report.comparison_markdown import render_gate
    from loadrepro.report.write import write_gate
    from loadrepro.runs.repeats import gate_runs

    result = gate_runs(baseline, run, tolerance, dirs, history)
    names = (_named(dirs[0], baseline), _named(dirs[1], run))
    echo(render_gate(result, *names))
    if out is not None:
        for path in write_gate(result, out, *names):
            echo(f"gate: {path}")
    raise typer.Exit(0 if result.passed else 1)


def _gate_batteries(paths: tuple[Path, Path], batteries: tuple[StressReport | MatrixReport | None, ...], gate: bool,
                    history: Path | None, tolerance: float, out: Path | None) -> NoReturn:
    """Two stress batteries phase by phase, or two release matrices build by build (compare/stress_gate.py)."""
    from loadrepro.compare.stress_gate import matrix_gate, stress_gate
    from loadrepro.report.comparison_markdown import render_gate
    from loadrepro.report.write import write_gate
    from loadrepro.schema.stress_report import MatrixReport, StressReport

    first, second = batteries
    if not gate:
        raise UsageError("two stress batteries are compared phase by phase by the gate: add --gate")
    if history is not None:
        raise UsageError(f"--history {history}: a battery's phases are gated against the baseline's alone, without "
                         "a history")
    if isinstance(first, StressReport) and isinstance(second, StressReport):
        result = stress_gate(first, second, tolerance)
    elif isinstance(first, MatrixReport) and isinstance(second, MatrixReport):
        result = matrix_gate(first, second, tolerance)
    else:
        kinds = [_kind(b) for b in batteries]
        raise UsageError(f"compare --gate takes two of a kind: {paths[0]} is {kinds[0]}, {paths[1]} {kinds[1]}")
    names = tuple(str(_run_dir(p)) + (f" ({b.label})" if isinstance(b, StressReport) and b.label not in ("", "run")
                                       else "") for p, b in zip(paths, batteries, strict=True))
    echo(render_gate(result, *names))
    if out is not None:
        for path in write_gate(result, out, *names):
            echo(f"gate: {path}")
    raise typer.Exit(0 if result.passed else 1)


def _kind(battery: StressReport | MatrixReport | None) -> str:
    from loadrepro.schema.stress_report import StressReport

    return ("a run's report" if battery is None else "a stress battery (stress.json)"
            if isinstance(battery, StressReport) else "a release matrix (matrix.json)")


def _named(run_dir: Path, report: RunReport) -> str:
    """A run named by its directory, as given, and its label when one was set (every run's default is "run")."""
    return str(run_dir) if report.label in ("", "run") else f"{run_dir} ({report.label})"


def bundle(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (it holds report.json).")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="The zip to write.")] = None,
    redact_host: Annotated[bool, typer.Option(help=(
        "Replace the target's host and other machines' names and IP addresses (loopback ones are kept)."))] = False,
    title: Annotated[str | None, typer.Option(help=(
        "The README's title (default: the engine and what failed, from the run)."))] = None,
) -> None:
    """Pack a run into one zip a maintainer can replay without loadrepro (python3 replay.py --base-url URL)."""
    from loadrepro.report.bundle import make_bundle
    from loadrepro.runs.run_facts import engine_template

    path = make_bundle(run_dir, output, redact_host, title, engine_template(run_dir))
    echo(f"bundle: {path} ({path.stat().st_size / 1e6:.2f} MB)")


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
        echo(line)


def diagnose_command(
    paths: Annotated[list[Path], typer.Argument(help="Engine logs (one per rank), or one run directory.")],
    md: Annotated[bool, typer.Option("--md", help="Markdown, with the 100 lines before the first fatal one.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON.")] = False,
) -> None:
    """Find the first failure signatures in engine logs, the initiating rank and the collateral ones, the capacity
    figures the engine logged, and the next step. Exit 0: no failure; 1: a fatal signature, or (a run directory) a
    request that failed with a known error text or a run that failed; 2: unreadable."""
    from loadrepro.judge.diagnose import diagnose, logs_of
    from loadrepro.report.diagnosis import to_json, to_markdown, to_text

    if len(paths) == 1 and paths[0].is_dir():
        given = logs_of(paths[0])
        result = diagnose(given.paths, verification=given.verification, ended=given.ended,
                          run_reasons=given.run_reasons, no_log=given.no_log)
    else:
        logs = [log for path in paths for log in logs_of(path).paths]
        result = diagnose(logs, verification=logs_of(paths[0]).verification)
    echo(to_json(result) if json_ else to_markdown(result) if md else to_text(result))
    raise typer.Exit(1 if result.failed else 0)


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
    echo(result.model_dump_json(indent=2) if json_ else "\n".join(describe_probe(result)))


def init_command(
    engine: Annotated[str, typer.Argument(help="The engine at the URL: llamacpp or vllm.", metavar="llamacpp|vllm")],
    base_url: Annotated[str, typer.Option(help="The engine's OpenAI-compatible URL.")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write the profile here (default: print it).")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite --out when it exists.")] = False,
    api_key_env: Annotated[str, typer.Option(help="Environment variable holding the API key.")] = API_KEY_ENV,
    target_is_isolated: Annotated[bool, typer.Option(
        help="Confirm a non-loopback target is an isolated test engine.")] = False,
) -> None:
    """Write a starter profile for the llama.cpp or vLLM server at --base-url, from a probe of it: prefix-shared
    conversations sized to the context a request may have and to its slots or KV pool, each number commented."""
    import asyncio
    import os

    from loadrepro.load.target import check_base_url
    from loadrepro.runs.starter import FLAVOURS, probed, starter_profile

    if engine not in FLAVOURS:
        raise UsageError(f"loadrepro init: the engine is one of {', '.join(FLAVOURS)}, not {engine!r}")
    if out is not None and out.exists() and not force:
        raise UsageError(f"{out} exists: give another -o, or --force to overwrite it")
    url = check_base_url(base_url, target_is_isolated)
    target = asyncio.run(probed(engine, url, os.environ.get(api_key_env) or None))
    text = starter_profile(engine, target)
    if out is None:
        echo(text.rstrip("\n"))
        return
    out.write_text(text, encoding="utf-8")
    echo(f"profile: {out}")
    echo(f"next: loadrepro run --profile {out} --base-url {url}")


def list_profiles() -> None:
    """List the built-in profiles with their descriptions."""
    from loadrepro.config.profile_files import builtin_profiles, load_profile

    for name in builtin_profiles():
        echo(f"{name:22} {load_profile(name).description}")


TraceFormatOption = Annotated[str, typer.Option(
    "--format", help="auto (from the content), mooncake, bailian, azure, burstgpt, sharegpt, openai-log or weka.")]
TokenizerOption = Annotated[Path | None, typer.Option(
    help="Count in this local Hugging Face tokenizer's tokens (tokenizer.json or its folder), chat template "
         "applied.")]
TraceUrlOption = Annotated[str | None, typer.Option(
    help="Count with this engine's tokenize endpoint (vLLM, llama.cpp), chat template applied; it generates "
         "nothing, so its prefix cache is not touched.")]


def trace_inspect(
    file: Annotated[Path, typer.Argument(help="The trace file.")],
    format_: TraceFormatOption = "auto",
    block_tokens: Annotated[int, typer.Option(
        min=0, help="Tokens per hash id; 0: the format's own (mooncake 512, bailian 16, weka the file's).")] = 0,
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
    echo(stats.model_dump_json(indent=2) if json_ else "\n".join(describe_stats(stats)))


def trace_anonymize(
    file: Annotated[Path, typer.Argument(help="A text trace: an OpenAI request log or ShareGPT conversations.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="The trace to write.")],
    format_: TraceFormatOption = "auto",
    block_tokens: Annotated[int, typer.Option(min=1, help="Tokens per hash id block.")] = 512,
    tokenizer: TokenizerOption = None,
    base_url: TraceUrlOption = None,
    model: Annotated[str | None, typer.Option(help="With --base-url: the model (default: the first listed).")] = None,
    api_key_env: Annotated[str, typer.Option(help="Environment variable holding the API key.")] = API_KEY_ENV,
    target_is_isolated: Annotated[bool, typer.Option(
        help="Confirm a non-loopback --base-url is an isolated test engine.")] = False,
    to: Annotated[str, typer.Option(
        "--to", help="mooncake, weka (an agent trace, tool round trips kept), or auto: weka when the log holds tool "
        "calls.")] = "auto",
) -> None:
    """Write a trace that keeps the lengths, sessions, timing and shared prefixes of a text trace and none of its
    words: Mooncake's format (session_id, timestamp, input_length, output_length, hash_ids), or WEKA's for an
    agent's log. Block ids are keyed hashes of the prompt's tokens, numbered, with the key thrown away. Replay it
    with kind = "trace" and trace_block_tokens set to --block-tokens."""
    import asyncio
    import os

    from loadrepro.cli.trace_commands import anonymize_command

    if to not in ("auto", "mooncake", "weka"):
        raise UsageError(f"--to {to!r}: auto, mooncake or weka")
    done = asyncio.run(anonymize_command(file, output, format_, block_tokens, tokenizer, base_url,
                                         os.environ.get(api_key_env) or None, model, target_is_isolated,
                                         lambda n: say(f"{n:,} requests written"), to))
    echo(f"written    {done.output} ({done.written_format}): {done.requests:,} requests in {done.sessions:,} "
         f"sessions, {done.blocks:,} "
          f"distinct blocks of {done.block_tokens} tokens ({done.trace_format} in, lengths counted with "
          f"{done.tokenizer})")
    if done.skipped.total:
        echo(f"left out   {done.skipped.describe()}")
    echo(f"replay     --set workload.kind='\"trace\"' --set workload.trace='\"{done.output}\"' "
          f"--set workload.trace_block_tokens={done.block_tokens}")


def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (requests.jsonl, samples.jsonl, run.json).")],
    png: Annotated[bool, typer.Option("--png", help="Draw the pictures as PNG files too (timeline, latency).")] = False,
) -> None:
    """Rebuild a run's reports from its directory: a run killed before its report (SIGKILL) gets one, marked
    incomplete, with every record that reached the disk. Exits as `run` does: 0 pass, 1 fail, 2 when not one
    request fit the target."""
    from loadrepro.runs.rebuild import rebuild

    rebuilt, written = rebuild(run_dir, png)
    echo(f"verdict: {rebuilt.verdict.upper()}  ({rebuilt.requests.total:,} requests; stop reason "
         f"{rebuilt.stop_reason})")
    for path in written:
        echo(f"report: {path}")
    raise typer.Exit(rebuilt.exit_code)
