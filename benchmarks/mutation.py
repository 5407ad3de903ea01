"""Share of mutants the test suite kills in loadrepro's pure core (classify, verdict, capacity, the simulated
engine's KV cache, the death judge, the windows of long runs and their rules), measured with mutmut on a copy of
the project at a given git revision.

    pip install mutmut==3.8.1
    python benchmarks/mutation.py                 # the working tree's HEAD
    python benchmarks/mutation.py --rev ce2ce8c   # an earlier revision, for a before/after figure

The copy gets a [tool.mutmut] section naming the modules and the unit tests that exercise them; modules or tests a
revision does not have are left out (and reported). Killed share = (killed + timeout) / mutants that were tested.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter, defaultdict
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ("classify.py", "verdict.py", "capacity.py", "kvcache.py", "death.py", "windows.py", "counts.py")
TESTS = ("tests/test_classify.py", "tests/test_classify_exact.py", "tests/test_capacity.py",
         "tests/test_capacity_edges.py", "tests/sim/test_kvcache.py", "tests/sim/test_scheduler.py",
         "tests/test_death.py", "tests/test_profile_signatures.py", "tests/test_runner.py",
         "tests/test_statistics.py", "tests/test_soak.py", "tests/test_counts.py")


def checkout(rev: str, into: Path) -> None:
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")


def configure(copy: Path) -> tuple[list[str], list[str]]:
    modules = sorted(str(p.relative_to(copy)) for p in (copy / "loadrepro").rglob("*.py") if p.name in CORE)
    tests = [t for t in TESTS if (copy / t).exists()]
    quoted = lambda items: "[" + ", ".join(f'"{i}"' for i in items) + "]"  # noqa: E731
    with (copy / "pyproject.toml").open("a") as f:
        f.write(f'\n[tool.mutmut]\nsource_paths = ["loadrepro"]\nonly_mutate = {quoted(modules)}\n'
                f'pytest_add_cli_args_test_selection = {quoted(tests)}\n'
                'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x"]\nalso_copy = ["tests", "profiles"]\n')
    return modules, tests


def shares(results: str) -> dict[str, Counter[str]]:
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for line in results.splitlines():
        if ": " in line and "__mutmut_" in line:
            name, status = line.strip().rsplit(": ", 1)
            module = name.split("__mutmut_")[0].rsplit(".", 1)[0]
            by_module[module][status.strip()] += 1
    return by_module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--children", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (`mutmut show NAME` there)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loadrepro-mutation-") as tmp:
        copy = args.keep or Path(tmp)
        copy.mkdir(parents=True, exist_ok=True)
        checkout(args.rev, copy)
        modules, tests = configure(copy)
        print(f"revision {args.rev}: mutating {', '.join(modules)}\n  with {', '.join(tests)}", flush=True)
        subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(args.children)], cwd=copy,
                       capture_output=True, text=True)
        results = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=copy,
                                 capture_output=True, text=True).stdout
    total: Counter[str] = Counter()
    print(f"{'module':42} {'mutants':>8} {'killed':>7} {'survived':>9} {'no tests':>9} {'share':>7}")
    for module, counts in sorted(shares(results).items()):
        total += counts
        print(_row(module, counts))
    print(_row("all", total))


def _row(name: str, counts: Counter[str]) -> str:
    killed = counts["killed"] + counts["timeout"]
    tested = sum(counts.values()) - counts["no tests"] - counts["skipped"]
    share = f"{killed / tested:.0%}" if tested else "-"
    return f"{name:42} {sum(counts.values()):>8} {killed:>7} {counts['survived']:>9} {counts['no tests']:>9} {share:>7}"


if __name__ == "__main__":
    main()
