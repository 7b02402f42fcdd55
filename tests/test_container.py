"""The image as the README runs it (``docker run -p 8000:8000 -v SNAPSHOT:/snapshot:ro docsrv``),
without Docker: docsrv installed as the Dockerfile installs it (not editable: no source tree
beside it), run with the Dockerfile's environment and command on a read-only root, with the
snapshot bind-mounted read-only where the image's volume is (``confined.py``). The Dockerfile is
parsed, so that it and this test cannot drift apart. (Its user, nobody, is not taken: this
machine's Python is its owner's alone; the read-only mounts hold for root too.)"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from confined import Confined, Volume
from conftest import ROOT
from helpers import docsrv, sealed


def dockerfile() -> dict:
    """The Dockerfile's ENV (as a dict), VOLUME, USER and CMD."""
    found: dict = {"env": {}}
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        word, _, rest = line.partition(" ")
        if word == "ENV":
            found["env"].update(dict(pair.split("=", 1) for pair in shlex.split(rest)))
        elif word in ("VOLUME", "CMD"):
            found[word.lower()] = json.loads(rest)
    return found


def container(installed: Path, outside: Path, snapshot: Path | None) -> tuple[Confined, dict[str, str]]:
    """The image's volumes and environment, as a confined process sees them."""
    spec = dockerfile()
    assert spec["cmd"] == ["docsrv", "serve"]
    (volume_path,) = spec["volume"]
    tmp = outside / "tmp-volume"
    tmp.mkdir()
    volumes = [Volume(tmp, "/tmp")]
    if snapshot is not None:
        volumes.append(Volume(snapshot, volume_path, read_only=True))
    confined = Confined(outside / "mounts", volumes)
    env = {name: confined.translate(value) for name, value in spec["env"].items()}
    return confined, {**env, **confined.environment(), "PYTHONPATH": str(installed)}


def test_the_confined_process_runs_the_installed_docsrv(installed, outside):
    """What the tests below run is the copy installed as the image installs it, not the checkout."""
    confined, env = container(installed, outside, None)
    ran = confined.run([sys.executable, "-c", "import docsrv.serve.worker; print(docsrv.serve.worker.DEMO_SNAPSHOT)"], env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == str(installed / "docsrv" / "demo")


def test_the_readme_container_line_serves_a_read_only_snapshot_trusted(installed, outside, start_server):
    snapshot = sealed(outside / "published", "snap-image")
    assert docsrv("index", str(snapshot)).returncode == 0  # prepared where it could be written
    confined, env = container(installed, outside, snapshot)
    server = start_server(env=env, cwd=outside, prefix=confined.prefix())
    ready = server.wait_for("serving snapshot snap-image")
    assert "checked whole" not in ready, "".join(server.log)
    assert not any("Traceback" in line or "is not prepared" in line or "search index" in line for line in server.log)
    assert [p["slug"] for p in server.json("/api/v2/project/?slug=pip")["results"]] == ["pip"]
    assert server.json("/api/v1/file/search/?q=installer")["objects"]
    assert server.json("/readyz")["snapshot"] == "snap-image"
    server.stop()
    assert list((outside / "tmp-volume").iterdir()) == []  # the run directory goes with the server


def test_an_installed_docsrv_serves_its_demo_snapshot(installed, outside, start_server):
    """``docsrv serve`` with no snapshot serves the demo, installed with the package (not looked up
    in a source tree that an installed docsrv does not have), on a read-only root."""
    confined, env = container(installed, outside, None)
    server = start_server(env={**env, "DOCSRV_SNAPSHOT": ""}, cwd=outside, prefix=confined.prefix())
    server.wait_for("serving snapshot demo")
    assert [p["slug"] for p in server.json("/api/v2/project/?slug=pip")["results"]] == ["pip"]
    assert server.json("/api/v1/file/search/?q=pip")["objects"]
    assert not (installed / "docsrv" / "demo" / "index").exists()  # its index was built in /tmp: nothing written beside it
