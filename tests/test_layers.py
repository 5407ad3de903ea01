"""What the layers' static checks (.ci/imports, .ci/types, .ci/lint) cannot say: the cycle finder .ci/imports runs
finds a cycle, and no rule reads a note's words."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cycles():
    spec = importlib.util.spec_from_file_location("import_cycles", ROOT / "scripts" / "import_cycles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cycles


def test_the_cycle_finder_finds_a_cycle_through_a_third_module():
    cycles = _cycles()
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert cycles({"a": {"a"}}) == [["a"]]


def test_no_rule_and_no_session_reads_a_notes_words():
    """Rules and the session read typed facts (NoteSource, RunResult fields), never a note's text or a source
    spelled as a string: rewording a note cannot change a verdict."""
    import re

    package = ROOT / "loadrepro"
    words = re.compile(r"\bn\.text\b|\.source (==|in|!=) [\"'(]")  # a note is `n` wherever notes are read
    files = [*sorted((package / "judge").glob("*.py")), package / "runs" / "session.py",
             package / "load" / "runner.py", *sorted((package / "shrink").glob("*.py")),
             package / "runs" / "repeats.py"]
    found = [f"{path.name}:{i}: {line.strip()}" for path in files
             for i, line in enumerate(path.read_text().splitlines(), 1) if words.search(line)]
    assert not found, found
