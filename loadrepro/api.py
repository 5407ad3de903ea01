"""loadrepro from Python: run a profile, compare stock with patched, shrink a failure (`shrink_failure`), load a
profile. The command line and the pytest plugin are layers over these: `run_options`, `ab_sides` and
`shrink_options` are the one place a run's input is checked and its defaults chosen, whoever starts it.

Errors: loadrepro's own problems raise the exceptions of `loadrepro.errors` (UsageError and ProfileError for bad
input, TargetUnreachable when nothing answers, InternalError for a bug of loadrepro's own); what the target did is
in the returned report (`report.passed`, `report.reasons`, `report.findings`), never an exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from loadrepro.config.defaults import (
    API_KEY_ENV,
    ENGINE_START_TIMEOUT_S,
    SHRINK_MAX_TRIALS,
    SHRINK_TIME_BUDGET_S,
    run_stamp,
)
from loadrepro.config.options import AbArguments, Arguments, RunArguments, ShrinkArguments, SweepArguments, url_list
from loadrepro.config.profile import Profile
from loadrepro.config.profile_files import load_profile as _load_profile
from loadrepro.config.profile_files import with_overrides
from loadrepro.errors import UsageError
from loadrepro.runs.dispatch import run_any
from loadrepro.runs.progress import Say
from loadrepro.runs.run_options import REPORTS_ROOT, RunOptions

if TYPE_CHECKING:  # what ab, sweep and shrink take or return: imported when they run, which `run` never waits on
    from loadrepro.compare.comparison import Comparison
    from loadrepro.runs.ab import Side
    from loadrepro.schema.run_report import RunReport
    from loadrepro.schema.sweep_report import SweepReport
    from loadrepro.shrink.command import ShrinkOptions, ShrinkResult

A = TypeVar("A", bound=Arguments)


def load_profile(name_or_path: str | Path, overrides: Sequence[str] = ()) -> Profile:
    """A built-in profile by name, or a profile TOML by path, with `KEY=VALUE` overrides (VALUE read as TOML).

    >>> import loadrepro
    >>> loadrepro.load_profile("quickstart", ["workload.conversations=2"]).workload.conversations
    2
    """
    return _load_profile(str(name_or_path), list(overrides))


def _profile(profile: str | Path | Profile, overrides: Sequence[str] | None) -> Profile:
    if isinstance(profile, Profile):
        return with_overrides(profile, list(overrides or ()))
    return load_profile(profile, overrides or ())


def _url(url: str | None, target_is_isolated: bool) -> str | None:
    from loadrepro.load.target import check_base_url

    return check_base_url(url, target_is_isolated) if url else None


def _given(model: type[A], call: dict[str, Any]) -> A:
    """A program's call as the model of its arguments: a program chose its target deliberately (so the target is
    taken as isolated) and shows no progress display."""
    return model.of(call | {"quiet": True, "target_is_isolated": True})


def run_options(args: RunArguments | AbArguments, *, label: str | None = None, command: str | None = None,
                on_verdict: Callable[[RunReport], None] | None = None) -> RunOptions:
    """One run's (or each side's of an A/B) input checked and its defaults chosen, from the arguments of `run`
    (the command line's flags). `verify` checks a sample of answers ([verify] outputs = "sample") when the profile
    checks none."""
    resolved = _profile(args.profile, args.overrides)
    if args.fit and args.size_to_overrun:
        raise UsageError("--fit and --size-to-overrun size the workload each their own way: give one of them")
    if ((args.workers or 1) > 1 or args.ray) and any(e.action == "abort_burst" for e in resolved.chaos.events):
        raise UsageError("[[chaos.events]] abort bursts cancel requests in flight in this process: run them without "
                         "--workers and --ray")
    if args.verify and resolved.verify.outputs == "off":
        resolved = resolved.model_copy(update={"verify": resolved.verify.model_copy(update={"outputs": "sample"})})
    target = args if isinstance(args, RunArguments) else RunArguments()
    urls = [_url(u, args.target_is_isolated) or u for u in target.base_urls]
    url = urls[0] if urls else None
    resolved = _with_replicas(resolved, urls[1:], url, isinstance(args, AbArguments), args.target_is_isolated)
    if target.tokenizer is not None:
        from loadrepro.workload.tokens import LocalTokenizerCounter

        LocalTokenizerCounter(target.tokenizer)  # a wrong path is a usage error before any engine starts
    return RunOptions(
        resolved, url, args.model,
        label or target.label or ("run" if url or target.engine_cmd else resolved.sim.policy), args.out,
        args.api_key_env, args.quiet, command=command or f"loadrepro run --profile {resolved.name}",
        engine_cmd=target.engine_cmd, engine_start_timeout_s=args.engine_start_timeout_s,
        size_to_overrun=args.size_to_overrun, fit=args.fit, tokenizer=target.tokenizer,
        workers=args.workers if args.workers is not None else 2 if args.ray else 1, ray=args.ray,
        on_verdict=on_verdict, trials=args.trials, vary_seed=args.vary_seed,
        alpha=args.alpha if isinstance(args, AbArguments) else 0.05, serve_metrics=args.serve_metrics,
        replicas=args.replicas, png=args.png)


def _with_replicas(profile: Profile, given: list[str], url: str | None, ab: bool, isolated: bool) -> Profile:
    """The replicas given on the command line beside the profile's ([target] replicas), in the profile the run
    writes (a rerun of it, a shrink, a trial send to the same replicas)."""
    replicas = (*given, *(_url(u, isolated) or u for u in profile.target.replicas))
    if replicas and (url is None or ab):
        raise UsageError("[target] replicas spread the load over a target's replicas: give the target's own URL "
                         "first (--base-url URL, then one --base-url per replica); in `ab`, each side's replicas "
                         "by URL (--stock-url and --patched-url given more than once)")
    return profile.model_copy(update={"target": profile.target.model_copy(update={"replicas": replicas})})


def ab_sides(args: AbArguments) -> tuple[Side, Side]:
    """Each side of an A/B comparison as (its URLs checked, the first the engine and the others its replicas;
    command); ((), None) on both sides: the simulated engine's stock and patched policies."""
    return ((tuple(_url(u, args.target_is_isolated) or u for u in url_list(args.stock_url)), args.stock_cmd),
            (tuple(_url(u, args.target_is_isolated) or u for u in url_list(args.patched_url)), args.patched_cmd))


async def arun(profile: str | Path | Profile, *, say: Say | None = None, base_url: str | list[str] | None = None,
               engine_cmd: str | None = None, overrides: Sequence[str] | None = None, out: str | Path | None = None,
               model: str | None = None, label: str | None = None, workers: int | None = None,
               ray: str | None = None, tokenizer: str | Path | None = None, size_to_overrun: float | None = None,
               fit: bool = False,
               api_key_env: str = API_KEY_ENV, engine_start_timeout_s: float = ENGINE_START_TIMEOUT_S,
               verify: bool = False, trials: int = 1, vary_seed: bool = False,
        serve_metrics: int | None = None, replicas: int = 1, png: bool = False) -> RunReport:
    """`run` for callers already on an event loop.

    >>> import asyncio, tempfile, loadrepro
    >>> report = asyncio.run(loadrepro.arun("quickstart", out=tempfile.mkdtemp()))
    >>> report.passed, report.findings[0].name
    (False, 'engine_death')
    """
    options = run_options(_given(RunArguments, locals()))
    done = await run_any(options, say=say or (lambda _: None))
    return done.report.model_copy(update={"run_dir": str(done.run_dir)})


def run(profile: str | Path | Profile, *, say: Say | None = None, base_url: str | list[str] | None = None,
        engine_cmd: str | None = None, overrides: Sequence[str] | None = None, out: str | Path | None = None,
        model: str | None = None, label: str | None = None, workers: int | None = None, ray: str | None = None,
        tokenizer: str | Path | None = None, size_to_overrun: float | None = None, fit: bool = False,
        api_key_env: str = API_KEY_ENV, engine_start_timeout_s: float = ENGINE_START_TIMEOUT_S,
        verify: bool = False, trials: int = 1, vary_seed: bool = False,
        serve_metrics: int | None = None, replicas: int = 1, png: bool = False) -> RunReport:
    """Send a profile's workload to a target and judge it; the run directory (`out`, else one under reports/) holds
    report.json, report.md, junit.xml and the records. The target is `base_url`, or an engine loadrepro starts
    with `engine_cmd` (`{host}` and `{port}` filled in), or else the embedded simulated engine. `workers` sends the
    load from that many processes; `ray` ("local", or a cluster's address) makes them Ray actors (2 by default).
    `tokenizer` counts lengths in a local Hugging Face tokenizer's tokens; `size_to_overrun` F sizes the workload
    to F x the target's binding KV pool, and `fit` scales it so its longest request fits the target; the API key
    is read from the environment variable `api_key_env`; `verify` checks a sample of answers against the same
    requests sent alone after the load. `trials` N runs it N times, each on a fresh engine (`vary_seed`: seeds
    seed, seed+1, ...), and returns the summary: failing when any trial failed, its `trials` giving the failure
    rate and its interval. Every argument is described once, in
    `loadrepro.config.options.RunArguments`.

    >>> import tempfile, loadrepro
    >>> report = loadrepro.run("quickstart", overrides=["sim.policy='patched'"], out=tempfile.mkdtemp())
    >>> report.passed
    True
    """
    return asyncio.run(arun(**locals()))  # the same arguments, by name


def ab(profile: str | Path | Profile, *, stock_url: str | list[str] | None = None,
       patched_url: str | list[str] | None = None,
       stock_cmd: str | None = None, patched_cmd: str | None = None, overrides: Sequence[str] | None = None,
       out: str | Path | None = None, model: str | None = None, say: Say | None = None,
       workers: int | None = None, ray: str | None = None, size_to_overrun: float | None = None, fit: bool = False,
       api_key_env: str = API_KEY_ENV, engine_start_timeout_s: float = ENGINE_START_TIMEOUT_S,
       verify: bool = False, trials: int = 1, vary_seed: bool = False, alpha: float = 0.05,
       serve_metrics: int | None = None, replicas: int = 1, png: bool = False) -> Comparison:
    """The same seeded workload on a stock and a patched engine (each a URL or a command; with neither, the
    simulated engine's two policies), compared. `comparison.fix_confirmed` is True only when the fix holds. With
    `trials` N, each side runs up to N times, alternately, until decided: a fix is confirmed only when patched
    failed in no trial and stock failed significantly more often (one-sided Fisher exact test, p < `alpha`).
    Every argument is described once, in `loadrepro.config.options.AbArguments`.

    >>> import tempfile, loadrepro
    >>> loadrepro.ab("quickstart", out=tempfile.mkdtemp()).fix_confirmed
    True
    """
    args = _given(AbArguments, locals())
    stock, patched = ab_sides(args)
    options = run_options(args, label="ab")
    from loadrepro.runs.dispatch import ab_any

    return asyncio.run(ab_any(options, stock, patched, say=say or (lambda _: None))).comparison


def sweep(profile: str | Path | Profile, *, over: Literal["concurrency", "rate"] = "concurrency",
          values: str | None = None, ladder_from: float | None = None, ladder_to: float | None = None,
          factor: float = 2.0, stop_at_failure: bool = False, bisect: bool = True,
          base_url: str | list[str] | None = None,
          engine_cmd: str | None = None, stock_cmd: str | None = None, patched_cmd: str | None = None,
          overrides: Sequence[str] | None = None, out: str | Path | None = None, model: str | None = None,
          label: str | None = None, workers: int | None = None, ray: str | None = None,
          tokenizer: str | Path | None = None, size_to_overrun: float | None = None, fit: bool = False,
          api_key_env: str = API_KEY_ENV,
          engine_start_timeout_s: float = ENGINE_START_TIMEOUT_S, verify: bool = False, trials: int = 1,
          vary_seed: bool = False, serve_metrics: int | None = None, replicas: int = 1, png: bool = False,
          say: Say | None = None) -> SweepReport:
    """`loadrepro sweep`: one full run per load level (`over` concurrency or rate; `values` "1,2,4", or a geometric
    ladder `ladder_from` to `ladder_to` by `factor`), then a bisection to the breaking point; with `stock_cmd` and
    `patched_cmd`, both engines swept alike. Returns sweep.json's content (its `break`, `slo_capacity`, each
    level's figures and run directory); the files are in `out`. Every argument is described once, in
    `loadrepro.config.options.SweepArguments`.

    >>> import tempfile, loadrepro
    >>> loadrepro.sweep("quickstart", values="2,12", bisect=False, out=tempfile.mkdtemp()).break_.first_fail
    12.0
    """
    from loadrepro.runs.sweeps import ladder, run_sweep

    args = _given(SweepArguments, locals())
    levels = ladder(args.over, args.values, args.ladder_from, args.ladder_to, args.factor)
    sides = (((), args.stock_cmd), ((), args.patched_cmd)) if args.stock_cmd else None
    return asyncio.run(run_sweep(run_options(args), args.over, levels, args.stop_at_failure, args.bisect, sides,
                                 say or (lambda _: None))).report


def shrink_options(args: ShrinkArguments) -> ShrinkOptions:
    """One shrink's input checked and its defaults chosen (`shrink`'s arguments; the command line's flags).
    `confirm`: N runs the minimal workload N more times; "K/N" keeps a candidate when K of up to N runs failed."""
    from loadrepro.shrink.attempts import parse_confirm
    from loadrepro.shrink.command import ShrinkOptions

    after, each = parse_confirm(str(args.confirm))
    engine_cmd = args.engine_cmd
    if args.run_dir is not None:
        from loadrepro.shrink.attempts import engine_of

        resolved, command = engine_of(args.run_dir, engine_cmd)
        engine_cmd = engine_cmd or command
    else:
        assert args.profile is not None, "one of the two (ShrinkArguments)"
        resolved = _profile(args.profile, args.overrides)
    return ShrinkOptions(resolved, engine_cmd, args.out if args.out is not None else
                         REPORTS_ROOT / f"shrink-{resolved.name}-{run_stamp()}", args.model, args.predicate,
                         args.max_trials, args.time_budget_s, after, each, args.engine_start_timeout_s)


def shrink_failure(run_dir: str | Path | None = None, *, profile: str | Path | Profile | None = None,
           overrides: Sequence[str] | None = None, engine_cmd: str | None = None, predicate: str | None = None,
           max_trials: int = SHRINK_MAX_TRIALS, time_budget_s: float = SHRINK_TIME_BUDGET_S, confirm: int | str = 0,
           model: str | None = None, out: str | Path | None = None,
           engine_start_timeout_s: float = ENGINE_START_TIMEOUT_S, say: Say | None = None) -> ShrinkResult:
    """`loadrepro shrink`: the smallest workload that still fails the same way as a failing run (`run_dir`) or a
    `profile` (same fatal signature, else engine death, else first failure; or the signature `predicate` names), on
    a fresh engine per trial: `engine_cmd`, else the run's, else the simulated engine. Writes profile.toml, run/,
    bundle.zip and shrink.md to `out`; `confirm` N runs the smallest workload N more times, and "K/N" keeps a
    candidate only when it failed K of up to N runs (a flaky failure). `time_budget_s` bounds the whole shrink,
    every trial's engine start included; a trial's engine that is not healthy within `engine_start_timeout_s` stops
    it.

    >>> import tempfile, loadrepro
    >>> result = loadrepro.shrink_failure(profile="quickstart", max_trials=4, out=tempfile.mkdtemp())
    >>> result.shrunk.best.requests <= result.shrunk.steps[0].trial.requests
    True
    """
    from loadrepro.shrink.command import shrink

    options = shrink_options(ShrinkArguments.of(locals()))
    return asyncio.run(shrink(options, say=say or (lambda _: None)))
