"""loadrepro from Python: run a profile, compare stock with patched, load a profile. The command line and the
pytest plugin are layers over these.

Errors: loadrepro's own problems raise the exceptions of `loadrepro.errors` (UsageError and ProfileError for bad
input, TargetUnreachable when nothing answers, InternalError for a bug of loadrepro's own); what the target did is
in the returned report (`report.passed`, `report.reasons`, `report.findings`), never an exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from loadrepro.judge.compare import Comparison
from loadrepro.profile import Profile, with_overrides
from loadrepro.profile import load_profile as _load_profile
from loadrepro.run_report import RunReport
from loadrepro.session import RunOptions, run_ab, run_session


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


def _options(profile: Profile, base_url: str | None, engine_cmd: str | None, out: str | Path | None, label: str,
             model: str | None, workers: int | None, ray: str | None) -> RunOptions:
    if base_url and engine_cmd:
        from loadrepro.errors import UsageError

        raise UsageError("give base_url or engine_cmd, not both")
    url = None
    if base_url:
        from loadrepro.drive.target import check_base_url

        url = check_base_url(base_url, target_is_isolated=True)  # a program chose its target deliberately
    return RunOptions(profile, url, model, label, Path(out) if out is not None else None, quiet=True,
                      command=f"loadrepro run --profile {profile.name}", engine_cmd=engine_cmd,
                      workers=workers if workers is not None else 2 if ray else 1, ray=ray)


async def arun(profile: str | Path | Profile, *, base_url: str | None = None, engine_cmd: str | None = None,
               overrides: Sequence[str] | None = None, out: str | Path | None = None, model: str | None = None,
               label: str | None = None, say: Callable[[str], None] | None = None, workers: int | None = None,
               ray: str | None = None) -> RunReport:
    """`run` for callers already on an event loop.

    >>> import asyncio, tempfile, loadrepro
    >>> report = asyncio.run(loadrepro.arun("quickstart", out=tempfile.mkdtemp()))
    >>> report.passed, report.findings[0].name
    (False, 'engine_death')
    """
    resolved = _profile(profile, overrides)
    default = "run" if base_url or engine_cmd else resolved.sim.policy
    session = await run_session(_options(resolved, base_url, engine_cmd, out, label or default, model, workers, ray),
                                say=say or (lambda _: None))
    return session.report.model_copy(update={"run_dir": str(session.run_dir)})


def run(profile: str | Path | Profile, *, base_url: str | None = None, engine_cmd: str | None = None,
        overrides: Sequence[str] | None = None, out: str | Path | None = None, model: str | None = None,
        label: str | None = None, say: Callable[[str], None] | None = None, workers: int | None = None,
        ray: str | None = None) -> RunReport:
    """Send a profile's workload to a target and judge it; the run directory (`out`, else one under reports/) holds
    report.json, report.md, junit.xml and the records. The target is `base_url`, or an engine loadrepro starts
    with `engine_cmd` (`{host}` and `{port}` filled in), or else the embedded simulated engine. `workers` sends the
    load from that many processes; `ray` ("local", or a cluster's address) makes them Ray actors (2 by default).

    >>> import tempfile, loadrepro
    >>> report = loadrepro.run("quickstart", overrides=["sim.policy='patched'"], out=tempfile.mkdtemp())
    >>> report.passed
    True
    """
    return asyncio.run(arun(profile, base_url=base_url, engine_cmd=engine_cmd, overrides=overrides, out=out,
                            model=model, label=label, say=say, workers=workers, ray=ray))


def ab(profile: str | Path | Profile, *, stock_url: str | None = None, patched_url: str | None = None,
       stock_cmd: str | None = None, patched_cmd: str | None = None, overrides: Sequence[str] | None = None,
       out: str | Path | None = None, model: str | None = None,
       say: Callable[[str], None] | None = None, workers: int | None = None, ray: str | None = None) -> Comparison:
    """The same seeded workload on a stock and a patched engine (each a URL or a command; with neither, the
    simulated engine's two policies), compared. `comparison.fix_confirmed` is True only when the fix holds.

    >>> import tempfile, loadrepro
    >>> loadrepro.ab("quickstart", out=tempfile.mkdtemp()).fix_confirmed
    True
    """
    from loadrepro.drive.target import check_base_url
    from loadrepro.errors import UsageError

    sides = ((stock_url, stock_cmd), (patched_url, patched_cmd))
    if any(url and cmd for url, cmd in sides) or (any(any(side) for side in sides) and not all(any(side)
                                                                                             for side in sides)):
        raise UsageError("give each side a URL or a command (not both), or neither side (the simulated engine)")
    checked = [(check_base_url(url, target_is_isolated=True) if url else None, cmd) for url, cmd in sides]
    options = _options(_profile(profile, overrides), None, None, out, "ab", model, workers, ray)
    session = asyncio.run(run_ab(options, *checked, say=say or (lambda _: None)))
    return session.comparison
