"""The import contracts in pyproject.toml ([tool.importlinter]) hold, checked with import-linter; ruff finds
nothing; and mypy finds nothing in the modules it checks."""

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


def test_the_checked_modules_are_type_clean():
    """mypy, strict, over the modules pyproject.toml lists ([tool.mypy] files: the shared vocabulary, the judges,
    the workload, the simulated engine's pure core, the shrinker's search)."""
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "Success: no issues found" in done.stdout, done.stdout[-3000:] + done.stderr[-1000:]
