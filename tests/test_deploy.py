"""The Kubernetes deployment: every manifest valid against the Kubernetes schemas (strict: no
unknown field), the kustomization naming every one, and the settings given by environment
variables that `docsrv serve` reads."""

import os
import re
import subprocess
import sys
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
    assert sidecar["command"][:3] == ["docsrv", "snapshot", "pull"]
    assert float(sidecar["command"][sidecar["command"].index("--every") + 1]) <= 0.25  # a commit served within a second
    (first,) = pod["initContainers"]
    assert first["command"][:3] == ["docsrv", "snapshot", "pull"] and "--every" not in first["command"]
    mounts = {c["name"]: {m["mountPath"] for m in c["volumeMounts"]} for c in [*pod["containers"], first]}
    assert all("/snapshots" in paths and "/tmp" in paths for paths in mounts.values())


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """``$(NAME)`` in a container's command, as Kubernetes expands it from the container's env."""
    return re.sub(r"\$\((\w+)\)", lambda match: env.get(match.group(1), match.group(0)), text)


class Pod:
    """The Deployment's pod, run here: each container confined to a read-only root with the
    manifest's own volume mounts (``confined.py``), its volumes directories shared between them."""

    def __init__(self, outside: Path, installed: Path) -> None:
        from confined import Confined, Volume

        (deployment,) = documents(DEPLOY / "deployment.yaml")
        self.spec = deployment["spec"]["template"]["spec"]
        self.installed = installed
        self.outside = outside
        volumes = {}
        for volume in self.spec["volumes"]:
            assert "emptyDir" in volume, volume
            volumes[volume["name"]] = outside / "volumes" / volume["name"]
            volumes[volume["name"]].mkdir(parents=True)
        self.containers = {c["name"]: c for c in [*self.spec["initContainers"], *self.spec["containers"]]}
        self.confined = {
            name: Confined(outside / "mounts", [Volume(volumes[m["name"]], m["mountPath"], m.get("readOnly", False))
                                                for m in container["volumeMounts"]])
            for name, container in self.containers.items()
        }
        for container in self.containers.values():
            assert container["securityContext"]["readOnlyRootFilesystem"] is True

    def env(self, name: str, **values: str) -> dict[str, str]:
        confined = self.confined[name]
        env = {e["name"]: confined.translate(values.get(e["name"], e["value"])) for e in self.containers[name].get("env", [])}
        return {**env, **confined.environment(), "PYTHONPATH": str(self.installed)}

    def argv(self, name: str, env: dict[str, str]) -> list[str]:
        command = self.containers[name]["command"]
        assert command[0] == "docsrv"
        args = [self.confined[name].translate(k8s_expand(arg, env)) for arg in command[1:]]
        return [*self.confined[name].prefix(), sys.executable, "-m", "docsrv", *args]


def test_the_deployment_runs_as_shipped_init_pull_server_and_sidecar(outside, installed, tmp_path, start_server):
    """The pod of deploy/kubernetes/deployment.yaml, each container with the manifest's mounts on
    a read-only root: the init container pulls, the server serves what it pulled (trusted: the
    pull prepared it) and answers its probes, and the sidecar's pull of a newer snapshot is
    served."""
    from helpers import Origin, poll, sealed

    origin = Origin(tmp_path / "origin")
    try:
        origin.publish(sealed(tmp_path / "a", "snap-a", "pip (a)"))
        pod = Pod(outside, installed)
        init_env = pod.env("first-pull", DOCSRV_ORIGIN=origin.url)
        first = subprocess.run(pod.argv("first-pull", init_env), env={**os.environ, **init_env}, cwd=outside,
                               capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr
        server_container = pod.containers["docsrv"]
        server = start_server(env=pod.env("docsrv"), cwd=outside, prefix=pod.confined["docsrv"].prefix())
        ready = server.wait_for("serving snapshot snap-a")
        assert "checked whole" not in ready, "".join(server.log)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert server.get(server_container[probe]["httpGet"]["path"]).status == 200, probe
        assert server.json("/api/v2/project/?slug=pip")["results"][0]["name"] == "pip (a)"
        sidecar_env = pod.env("pull", DOCSRV_ORIGIN=origin.url)
        sidecar = subprocess.Popen(pod.argv("pull", sidecar_env), env={**os.environ, **sidecar_env},
                                   cwd=outside, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            origin.publish(sealed(tmp_path / "b", "snap-b", "pip (b)"))
            server.wait_for("reloaded: serving snapshot snap-b", timeout=120)
            poll(lambda: server.json("/api/v2/project/?slug=pip")["results"][0]["name"] == "pip (b)", what="snap-b served")
        finally:
            sidecar.terminate()
            sidecar.wait(timeout=30)
        assert not any("Traceback" in line for line in server.log)
    finally:
        origin.close()
