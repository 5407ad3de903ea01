"""Open a soak's report.html and a comparison's compare.html in a real headless browser and save screenshots, to
look at the pages as a reader does (the timeline's window-by-window latency panel among them).

    python benchmarks/screenshots.py [--out DIR] [--browser /usr/bin/chromium] [--duration-s 12]

Runs two short soaks of the `soak` profile on the simulated engine (the second with a slower engine step), compares
them, then has Chromium (Debian's `chromium` package) render each page to a PNG. Prints the files it wrote.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def loadrepro(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadrepro", *args, "--quiet"] if args[0] == "run" else
                          [sys.executable, "-m", "loadrepro", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def soak(out: Path, duration_s: float, *extra: str) -> None:
    done = loadrepro("run", "--profile", "soak", "--out", str(out), "--set", f"load.duration_s={duration_s}",
                     "--set", f"verdict.window_s={duration_s / 4:g}", "--set", "workload.conversations=6",
                     "--set", "watch.canary_interval_s=1", "--png", *extra)
    if done.returncode not in (0, 1):
        sys.exit(f"the soak failed to run: {done.stderr[-2000:]}")


def screenshot(browser: str, page: Path, png: Path, profile: Path) -> None:
    # The flags a sandboxed machine without a display or network needs (no GPU, no background connections).
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={profile}", "--hide-scrollbars", "--window-size=1280,3000",
                    f"--screenshot={png}", page.resolve().as_uri()], check=True, capture_output=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="loadrepro-screens-")))
    parser.add_argument("--browser", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--duration-s", type=float, default=12.0)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    soak(out / "steady", args.duration_s)
    soak(out / "slower", args.duration_s, "--set", "sim.step_s=0.006")
    loadrepro("compare", str(out / "steady"), str(out / "slower"), "--out", str(out / "compare"))
    with tempfile.TemporaryDirectory() as profile:
        for page, png in ((out / "steady" / "report.html", out / "report.png"),
                          (out / "compare" / "compare.html", out / "compare.png")):
            screenshot(args.browser, page, png, Path(profile))
            print(png)


if __name__ == "__main__":
    main()
