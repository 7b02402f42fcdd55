"""What /metrics says of the processes themselves, read from /proc at each scrape (every 15 s or
so: nothing on the request path).

- ``process_*``, as Prometheus's client libraries name them, of the worker that answered:
  resident and virtual memory, CPU seconds, open and allowed file descriptors, start time.
- ``docsrv_memory_pss_bytes`` by kind of process (master, snapshot, worker), summed over the
  server: proportional set size counts each shared page once over the processes sharing it, so
  the sum is what the server holds (what a container's memory limit sees), where resident sizes
  would count the snapshot once per worker.
- ``docsrv_build_info``: docsrv's version, the snapshot format it reads, Python's version.
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
from pathlib import Path

from .. import __version__
from ..snapshot.records import FORMAT_VERSION

#: Metric families: name -> (type, help, samples); a sample is (labels, value).
Families = dict[str, tuple[str, str, list[tuple[dict[str, str], float]]]]

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_BOOT_TIME: float | None = None


def boot_time() -> float:
    global _BOOT_TIME
    if _BOOT_TIME is None:
        _BOOT_TIME = 0.0
        with contextlib.suppress(OSError, ValueError, StopIteration):
            line = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
            _BOOT_TIME = float(line.split()[1])
    return _BOOT_TIME


def own_process() -> Families:
    """The standard process metrics of this process."""
    families: Families = {}
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        # After the name: state is field 3; utime 14, stime 15, starttime 22, vsize 23, rss 24 (1-based).
        cpu = (int(fields[11]) + int(fields[12])) / _TICKS
        families["process_cpu_seconds_total"] = ("counter", "Total user and system CPU time spent in seconds.", [({}, cpu)])
        families["process_virtual_memory_bytes"] = ("gauge", "Virtual memory size in bytes.", [({}, int(fields[20]))])
        families["process_resident_memory_bytes"] = ("gauge", "Resident memory size in bytes.", [({}, int(fields[21]) * _PAGE)])
        start = boot_time() + int(fields[19]) / _TICKS
        families["process_start_time_seconds"] = ("gauge", "Start time of the process since unix epoch in seconds.", [({}, start)])
    with contextlib.suppress(OSError):
        families["process_open_fds"] = ("gauge", "Number of open file descriptors.", [({}, len(os.listdir("/proc/self/fd")))])
    families["process_max_fds"] = ("gauge", "Maximum number of open file descriptors.",
                                   [({}, resource.getrlimit(resource.RLIMIT_NOFILE)[0])])
    return families


def server_memory(master: int) -> Families:
    """The proportional set size of the master and its children, summed by kind of process."""
    sums: dict[str, float] = {}
    pids = [master]
    with contextlib.suppress(OSError):
        pids += [int(pid) for pid in Path(f"/proc/{master}/task/{master}/children").read_text().split()]
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            kind = Path(f"/proc/{pid}/comm").read_text().strip().removeprefix("docsrv-")
            pss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
                       if line.startswith("Pss:"))
            sums[kind] = sums.get(kind, 0) + pss * 1024
    samples = [({"process": kind}, value) for kind, value in sorted(sums.items())]
    return {"docsrv_memory_pss_bytes": ("gauge", "Proportional set size of the server's processes, by kind (master, "
                                        "snapshot: the process holding a snapshot, worker).", samples)}


def build_info() -> Families:
    labels = {"version": __version__, "snapshot_format": str(FORMAT_VERSION), "python": platform.python_version()}
    return {"docsrv_build_info": ("gauge", "docsrv's version, the snapshot format it reads and Python's version.", [(labels, 1)])}
