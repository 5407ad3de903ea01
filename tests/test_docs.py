"""The documentation: report.schema.json is the report's model, every key and field is described in the reference,
and the README stays a newcomer's page. The site's strict build and the reference pages being current are
checked by .ci/docs."""

import json
import re
from pathlib import Path

import pytest

from loadrepro.schema.run_report import RunReport

ROOT = Path(__file__).resolve().parents[1]


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
    assert '`.venv/bin/python -m pytest -q -m "not engine and not slow"`' in readme  # the fast tier, named
    for target in re.findall(r"\]\(([^)#]+)\)", readme):  # every file it links to is there
        assert (ROOT / target).exists(), target


def test_the_path_of_one_run_in_the_layout_page_names_code_that_is_there():
    """Each step of docs/layout.md's path of one run names a module and what it defines there: both exist, so the
    page cannot drift from the code unseen."""
    page = (ROOT / "docs" / "layout.md").read_text()
    table = page.split("## One `loadrepro run`")[1].split("\n\n")[1]
    named = re.findall(r"`([a-z_/]+\.py)` `(\w+)(?:\.(\w+))?`", table)
    assert len(named) >= 10, named
    for module, name, method in named:
        source = (ROOT / "loadrepro" / module).read_text()
        assert re.search(rf"^(async def|def|class) {name}\b", source, re.M), (module, name)
        if method:
            assert re.search(rf"^    (async def|def) {method}\b", source, re.M), (module, name, method)
