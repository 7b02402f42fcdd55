"""Debian's varnishd, run on loopback with the VCL docsrv ships (``deploy/varnish/docsrv.vcl``),
in front of a docsrv on another port."""

from __future__ import annotations

import http.client
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from conftest import ROOT

VCL = ROOT / "deploy" / "varnish" / "docsrv.vcl"


def varnishd() -> str:
    found = shutil.which("varnishd") or "/usr/sbin/varnishd"
    assert Path(found).exists(), "no varnishd: `make test-edge` installs Debian's varnish and varnish-modules"
    return found


class Varnish:
    def __init__(self, backend_port: int) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="docsrv-varnish-"))
        self.workdir.chmod(0o755)
        vcl = VCL.read_text().replace('.port = "8000";', f'.port = "{backend_port}";')
        assert f'.port = "{backend_port}";' in vcl
        (self.workdir / "docsrv.vcl").write_text(vcl)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            [varnishd(), "-F", "-a", f"127.0.0.1:{self.port}", "-f", str(self.workdir / "docsrv.vcl"),
             "-n", str(self.workdir / "n"), "-s", "malloc,128m", "-T", "none"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError("varnishd exited:\n" + self.process.stdout.read().decode(errors="replace"))
            try:
                if self.get("/healthz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("varnishd did not answer within 60 s")

    def request(self, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, http.client.HTTPMessage, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.headers, response.read()
        finally:
            connection.close()

    def get(self, path: str) -> tuple[int, http.client.HTTPMessage, bytes]:
        return self.request("GET", path)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def was_hit(headers: http.client.HTTPMessage) -> bool:
    """Whether Varnish answered from its cache: its X-Varnish names the request and the object's
    (two numbers) on a hit, the request alone on a miss."""
    return len((headers.get("X-Varnish") or "").split()) == 2
