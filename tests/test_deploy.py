"""The Kubernetes deployment: every manifest valid against the Kubernetes schemas (strict: no
unknown field), the kustomization naming every one, and the settings given by environment
variables that `docsrv serve` reads."""

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import ROOT
from docsrv.config import SERVE_OPTIONS

DEPLOY = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_each_manifest_is_a_valid_kubernetes_resource(path):
    for document in documents(path):
        kubernetes_validate.validate(document, kubernetes_validate.utils.latest_version(), strict=True)


def test_the_kustomization_names_every_manifest():
    kustomization = documents(DEPLOY / "kustomization.yaml")[0]
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == [p.name for p in MANIFESTS]


def test_the_deployment_serves_current_with_watch_probes_and_a_pull_sidecar():
    (deployment,) = documents(DEPLOY / "deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    server = next(c for c in pod["containers"] if c["name"] == "docsrv")
    env = {e["name"]: e["value"] for e in server["env"]}
    known = {option.env for option in SERVE_OPTIONS}
    assert set(env) <= known, set(env) - known
    assert env["DOCSRV_SNAPSHOT"] == "/snapshots/current" and env["DOCSRV_WATCH"] == "true"
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz" and server["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert server["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > 5 + 20 + 2  # preStop, drain, keep-alive grace
    sidecar = next(c for c in pod["containers"] if c["name"] == "pull")
    assert sidecar["command"][:3] == ["docsrv", "snapshot", "pull"] and "--every" in sidecar["command"]
    (first,) = pod["initContainers"]
    assert first["command"][:3] == ["docsrv", "snapshot", "pull"] and "--every" not in first["command"]
    mounts = {c["name"]: {m["mountPath"] for m in c["volumeMounts"]} for c in [*pod["containers"], first]}
    assert all("/snapshots" in paths and "/tmp" in paths for paths in mounts.values())
