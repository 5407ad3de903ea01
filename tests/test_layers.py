"""The import contracts in pyproject.toml ([tool.importlinter]) hold, checked with import-linter; no module
imports itself through others; ruff finds nothing; and mypy, strict, finds nothing in any module of the package."""

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


def test_the_whole_package_is_type_clean():
    """mypy, strict ([tool.mypy]), over every module of the package: the count it checked is the count there is."""
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    modules = len(list((ROOT / "loadrepro").rglob("*.py")))
    assert done.returncode == 0 and f"Success: no issues found in {modules} source files" in done.stdout, \
        done.stdout[-3000:] + done.stderr[-1000:]


def cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (strongly connected components of
    more than one module, or a module importing itself), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(imports.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(group) > 1 or module in imports.get(module, ()):
                found.append(sorted(group))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_third_module():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others():
    """Every import counts, a function's deferred one too (only those under TYPE_CHECKING do not): a cycle makes
    the order modules are imported in matter, and two modules that need each other are one module's job."""
    import grimp

    graph = grimp.build_graph("loadrepro", exclude_type_checking_imports=True)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert not cycles(imports)


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
