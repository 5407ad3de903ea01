"""A wheel built from the project, installed non-editable in a fresh virtual environment, has its built-in
profiles: `loadrepro ab --profile quickstart` works outside the source tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(900)
def test_the_installed_wheel_runs_the_quickstart_ab(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(ROOT)],
                   check=True, timeout=600, capture_output=True)
    wheel = next((tmp_path / "dist").glob("loadrepro-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=600,
                   capture_output=True)
    where = subprocess.run([str(python), "-c", "import loadrepro; print(loadrepro.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(tmp_path / "venv")), where  # the installed copy, not the source tree
    done = subprocess.run([str(tmp_path / "venv" / "bin" / "loadrepro"), "ab", "--profile", "quickstart", "--quiet",
                           "--out", str(tmp_path / "ab")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "fix confirmed" in done.stdout, done.stdout + done.stderr[-2000:]
