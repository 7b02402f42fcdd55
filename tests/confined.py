"""A process run as a container runs it: in a private mount namespace whose root filesystem is
read-only (``readOnlyRootFilesystem``), with volumes bind-mounted, each writable or read-only as
its manifest says. Needs root (as CI runs); ``available()`` says whether this machine allows it.

A volume's mount path (``/snapshots``) cannot be made on a read-only root, and one that exists
here (``/tmp``) cannot be mounted over without hiding what the process runs (a checkout, its
virtual environment, may be under /tmp): so each is mounted at the same path under a directory of
the test's, and the command's arguments and environment are given that path; a volume at /tmp is
the process's TMPDIR (``environment``), and the real /tmp is as read-only as the rest."""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Volume:
    source: Path
    mount_path: str
    read_only: bool = False


def available() -> str | None:
    """None when a confined process can run here, else why not."""
    if os.geteuid() != 0:
        return "a private mount namespace needs root (CI runs as root)"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "mount -o remount,ro,bind /"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else f"a private mount namespace is refused here: {probe.stderr.strip()}"


class Confined:
    """Where a container's volumes are (``outside``, a directory off the read-only root and not
    under a volume), and how to run a command in it."""

    def __init__(self, outside: Path, volumes: list[Volume]) -> None:
        self.outside = outside
        self.volumes = volumes

    def path(self, mount_path: str) -> str:
        """Where the container's ``mount_path`` is for its process."""
        return str(self.outside / mount_path.lstrip("/"))

    def environment(self) -> dict[str, str]:
        """What the process's environment needs for its volumes: TMPDIR, for a volume at /tmp."""
        return {"TMPDIR": self.path("/tmp")} if any(v.mount_path == "/tmp" for v in self.volumes) else {}

    def translate(self, text: str) -> str:
        """``text`` (an argument or an environment value) with each volume's path as its process sees it."""
        for volume in sorted(self.volumes, key=lambda v: len(v.mount_path), reverse=True):
            if text == volume.mount_path or text.startswith(volume.mount_path + "/"):
                return self.path(volume.mount_path) + text[len(volume.mount_path):]
        return text

    def prefix(self) -> list[str]:
        """The argv that runs what follows it confined."""
        steps = []
        for volume in self.volumes:
            target = self.path(volume.mount_path)
            if not Path(target).is_dir():
                Path(target).mkdir(parents=True)
            steps.append(f"mount --bind {shlex.quote(str(volume.source))} {shlex.quote(target)}")
            if volume.read_only:
                steps.append(f"mount -o remount,ro,bind {shlex.quote(target)}")
        steps.append("mount -o remount,ro,bind /")
        script = " && ".join(steps) + ' && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "confined"]

    def run(self, argv: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
        """Run ``argv`` confined, in ``outside`` (not in the checkout, whose modules would come first)."""
        return subprocess.run([*self.prefix(), *argv], capture_output=True, text=True, timeout=timeout, cwd=self.outside,
                              env={**os.environ, **env, **self.environment()})
