"""Every dependency pyproject.toml declares for the package is imported by it (extras aside)."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Distribution names whose import name differs.
IMPORT_NAMES = {"tomli-w": "tomli_w", "prometheus-client": "prometheus_client"}


def test_every_declared_dependency_is_imported_by_the_package():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    source = "\n".join(p.read_text() for p in (ROOT / "loadrepro").rglob("*.py"))
    for requirement in declared:
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0).lower()
        module = IMPORT_NAMES.get(name, name.replace("-", "_"))
        assert re.search(rf"^\s*(import|from) {module}\b", source, re.M), f"{name} is declared but never imported"
