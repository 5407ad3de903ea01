"""Wall time of `loadrepro --help` and `loadrepro profiles`: the median of 10 runs each, in fresh interpreters.

    python benchmarks/cli_startup.py                      # this checkout
    python benchmarks/cli_startup.py --source OTHER_TREE  # another checkout (e.g. `git worktree add /tmp/old REV`)

Runs `python -m loadrepro ...` with the source tree first on PYTHONPATH, so both trees are timed the same way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = 10


def wall(args: list[str], source: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(source)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "loadrepro", *args], env=env, cwd=source, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=ROOT)
    source = parser.parse_args().source.resolve()
    wall(["--help"], source)  # the first run fills the OS's file cache and writes bytecode
    for args in (["--help"], ["profiles"]):
        times = [wall(args, source) for _ in range(RUNS)]
        print(f"loadrepro {' '.join(args):10} median {statistics.median(times):.3f} s  "
              f"(min {min(times):.3f}, max {max(times):.3f}, {RUNS} runs; {source})")


if __name__ == "__main__":
    main()
