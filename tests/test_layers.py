"""The import contracts in pyproject.toml ([tool.importlinter]) hold, checked with import-linter; and ruff finds
nothing."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "0 broken" in done.stdout, done.stdout[-3000:] + done.stderr[-1000:]
    assert done.stdout.count("KEPT") == 2


def test_the_code_is_lint_clean():
    """ruff, with the rules pyproject.toml selects ([tool.ruff]), over the package, the tests, the benchmarks, the
    examples and the scripts."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "loadrepro", "tests", "benchmarks", "examples",
                           "scripts"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
