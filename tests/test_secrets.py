"""Secrets planted in the engine command, the base URL and the environment appear in no file of a run directory,
a comparison or a bundle, and nowhere in what loadrepro prints."""

from __future__ import annotations

import gzip
import shlex
import sys
import zipfile
from pathlib import Path

import pytest

from loadrepro.sim.config import sim_config
from loadrepro.sim.serve import sim_in_thread
from tests.helpers import Done, cli

ROOT = Path(__file__).resolve().parents[1]
PLANTED = {"command": "hf_PlantedInTheCommand0123456789", "password": "PlantedPassword77",
           "api key": "sk-PlantedInTheEnvironment4242", "env token": "PlantedEnvironmentToken99"}
SMALL = ["--set", "workload.conversations=3", "--set", "workload.prefix_tokens=2000", "--quiet"]


def loadrepro(*args: str) -> Done:
    return cli(*args, env={"OPENAI_API_KEY": PLANTED["api key"], "MY_SERVICE_TOKEN": PLANTED["env token"]})


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, with gzip files unpacked and zip members read."""
    found = {}
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as archive:
                found.update({f"{path}:{name}": archive.read(name) for name in archive.namelist()})
        found[str(path)] = data
    return found


@pytest.mark.timeout(600)
def test_planted_secrets_appear_in_no_file_and_no_output(tmp_path, pictures):
    engine = shlex.join([f"HF_TOKEN={PLANTED['command']}", sys.executable, "-m", "loadrepro", "sim", "--scenario",
                         "draft-pool", "--port", "{port}"])
    outputs = [loadrepro("run", "--engine-cmd", engine, "--out", str(tmp_path / "stock"), "--quiet")]
    assert outputs[0].returncode == 1, outputs[0].stderr[-2000:]
    with sim_in_thread(sim_config("healthy")) as sim:
        url = sim.url.replace("http://", f"http://someone:{PLANTED['password']}@")
        outputs.append(loadrepro("run", "--base-url", url, "--out", str(tmp_path / "url"), *SMALL))
    assert outputs[1].returncode == 0, outputs[1].stderr[-2000:]
    outputs.append(loadrepro("compare", str(tmp_path / "stock"), str(tmp_path / "url"), "--out", str(tmp_path / "cmp")))
    outputs.append(loadrepro("bundle", str(tmp_path / "stock"), "-o", str(tmp_path / "stock.zip")))
    outputs.append(loadrepro("bundle", str(tmp_path / "url"), "-o", str(tmp_path / "url.zip")))
    assert all(done.returncode in (0, 1) for done in outputs), [d.stderr[-500:] for d in outputs]
    files = contents(tmp_path)
    assert any(name.endswith("stock/report.json") for name in files) and any(".zip:" in name for name in files)
    assert any(name.endswith("stock/report.html") for name in files) and any(name.endswith("compare.html")
                                                                            for name in files)
    for what, secret in PLANTED.items():
        leaks = [name for name, data in files.items() if secret.encode() in data]
        leaks += [f"output of command {i}" for i, done in enumerate(outputs) if secret in done.stdout + done.stderr]
        assert not leaks, f"the {what} leaked into {leaks}"
    report = files[str(tmp_path / "stock" / "report.json")].decode()
    assert "HF_TOKEN=<redacted>" in report and "someone" not in files[str(tmp_path / "url" / "report.json")].decode()
