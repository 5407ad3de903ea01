"""The pytest plugin (installed with loadrepro): a `loadrepro_run` fixture for engines' own test suites.

    def test_admission_fix_holds(loadrepro_run):
        assert loadrepro_run.ab("quickstart").fix_confirmed

    def test_engine_survives_the_seed_workload(loadrepro_run):
        report = loadrepro_run("quickstart", engine_cmd="my-engine --port {port}")
        assert report.passed, report

Run directories go under the test's tmp_path, or under `--loadrepro-keep DIR` (one folder per test). When a test
that ran loadrepro fails, its output gets a "loadrepro" section with each run's verdict, reasons and report path.
The engine-driving modules are imported when a fixture is first used, not when pytest starts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from loadrepro.compare.comparison import Comparison
    from loadrepro.config.profile import Profile
    from loadrepro.schema.run_report import RunReport

_RUNS = pytest.StashKey["LoadreproRuns"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("loadrepro").addoption(
        "--loadrepro-keep", metavar="DIR", default=None,
        help="keep loadrepro's run directories under DIR/<test name> instead of the test's tmp_path")


class LoadreproRuns:
    """Call it to run a profile (`loadrepro.run`'s arguments), `await .arun(...)` from async tests, `.ab(...)` to
    compare stock and patched; every run gets its own directory under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lines: list[str] = []
        self._count = 0

    def _out(self, what: str) -> Path:
        self._count += 1
        return self.root / f"{self._count:02d}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', what)[:60]}"

    def _noted(self, report: RunReport) -> RunReport:
        reasons = "".join(f"\n    - {reason}" for reason in report.reasons)
        self.lines.append(f"{report.label}: {report.verdict.upper()}{reasons}\n    report: "
                          f"{Path(report.run_dir or '.') / 'report.md'}")
        return report

    def __call__(self, profile: str | Path | Profile, **options: Any) -> RunReport:
        """`loadrepro.run(profile, **options)`, its run directory this test's."""
        from loadrepro.api import run

        return self._noted(run(profile, **options, out=self._out(str(getattr(profile, "name", profile)))))

    async def arun(self, profile: str | Path | Profile, **options: Any) -> RunReport:
        """`await loadrepro.arun(profile, **options)`, its run directory this test's."""
        from loadrepro.api import arun

        return self._noted(await arun(profile, **options, out=self._out(str(getattr(profile, "name", profile)))))

    def ab(self, profile: str | Path | Profile, **options: Any) -> Comparison:
        """`loadrepro.ab(profile, **options)`: stock_url/stock_cmd and patched_url/patched_cmd, overrides, model..."""
        from loadrepro.api import ab

        out = self._out(f"ab-{getattr(profile, 'name', profile)}")
        comparison = ab(profile, **options, out=out)
        self.lines.append(f"ab: {comparison.conclusion} ({comparison.detail})\n    comparison: {out / 'compare.md'}")
        return comparison


@pytest.fixture
def loadrepro_run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LoadreproRuns]:
    """Runs loadrepro profiles against a URL, an engine command or the simulated engine; returns reports."""
    keep = request.config.getoption("--loadrepro-keep")
    root = Path(keep) / re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name) if keep else tmp_path / "loadrepro"
    runs = LoadreproRuns(root)
    request.node.stash[_RUNS] = runs
    yield runs


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield  # pluggy's result of the hooks below, typed loosely by pytest
    report = outcome.get_result()
    runs = item.stash.get(_RUNS, None)
    if runs is not None and runs.lines and report.when == "call" and report.failed:
        report.sections.append(("loadrepro", "\n".join(runs.lines)))
