"""The documentation: the site builds with `mkdocs build --strict` (every link and every API page resolves), the
reference pages and report.schema.json say what the code says, and the README stays a newcomer's page."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadrepro.run_report import RunReport

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    api = (tmp_path / "site" / "python" / "index.html").read_text()
    assert all(f'id="loadrepro.api.{name}"' in api for name in ("run", "ab", "shrink_failure", "run_options"))


def test_the_reference_pages_are_current():
    done = subprocess.run([sys.executable, "scripts/docs_reference.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_committed_schema_is_the_reports_model():
    committed = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    assert committed == RunReport.model_json_schema(by_alias=True)


@pytest.mark.parametrize(("page", "least"), [("profile.md", 80), ("report.md", 150)])
def test_every_profile_key_and_report_field_is_described_in_the_reference(page, least):
    rows = [line for line in (ROOT / "docs" / "reference" / page).read_text().splitlines() if line.startswith("| `")]
    undescribed = [line for line in rows if line.rstrip().endswith("|  |")]
    assert len(rows) > least and not undescribed, undescribed


def test_the_readme_is_a_newcomers_page_with_its_two_commands():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    assert len(readme.splitlines()) < 120
    assert blocks[0].strip() == ("python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && "
                                 ".venv/bin/loadrepro ab --profile quickstart")
    assert blocks[1].strip() == ".venv/bin/python -m pytest -q"
    for target in re.findall(r"\]\(([^)#]+)\)", readme):  # every file it links to is there
        assert (ROOT / target).exists(), target
