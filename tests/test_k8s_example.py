"""examples/k8s/: the soak Job and its volume claim are valid Kubernetes objects (kubernetes-validate, the
schemas of the newest Kubernetes it knows, strict: no field the schema lacks), and the Job runs a loadrepro soak
onto the claim it mounts."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = sorted((ROOT / "examples" / "k8s").glob("*.yaml"))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_each_manifest_is_a_valid_kubernetes_object(path: Path):
    for document in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


def test_an_invalid_manifest_is_refused():
    """The check can fail: a Job whose restartPolicy is not a string."""
    job = yaml.safe_load((ROOT / "examples" / "k8s" / "soak-job.yaml").read_text())
    job["spec"]["template"]["spec"]["restartPolicy"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, kubernetes_validate.latest_version(), strict=True)


def test_the_job_runs_a_soak_onto_the_claim_it_mounts():
    docs = {d["kind"]: d for p in MANIFESTS for d in yaml.safe_load_all(p.read_text())}
    job, claim = docs["Job"], docs["PersistentVolumeClaim"]
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    script = " ".join(container["args"])
    assert "loadrepro run --profile soak" in script and "--out \"/runs/" in script
    assert "--target-is-isolated" in script and job["spec"]["backoffLimit"] == 0
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/runs")
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
