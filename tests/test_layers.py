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


def test_no_rule_and_no_session_reads_a_notes_words():
    """Rules and the session read typed facts (NoteSource, RunResult fields), never a note's text or a source
    spelled as a string: rewording a note cannot change a verdict."""
    import re

    package = Path(__file__).resolve().parents[1] / "loadrepro"
    words = re.compile(r"\bn\.text\b|\.source (==|in|!=) [\"'(]")  # a note is `n` wherever notes are read
    files = [*sorted((package / "judge").glob("*.py")), package / "session.py", package / "drive" / "runner.py",
             *sorted((package / "shrink").glob("*.py")), package / "trial_runs.py"]
    found = [f"{path.name}:{i}: {line.strip()}" for path in files
             for i, line in enumerate(path.read_text().splitlines(), 1) if words.search(line)]
    assert not found, found
