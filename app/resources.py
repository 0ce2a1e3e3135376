"""What the embedded runtime holds: memory of the process that started Ray and all it spawned.

`ray.init()` in the CLI (or a benchmark) starts Ray's own processes (GCS, raylet, dashboard,
log monitor) as its children, and the raylet starts the workers that host Serve's controller,
proxy and replicas, so the process tree under the driver is the whole local runtime. RSS
counts a page shared by several processes once per process (libraries, the object store);
PSS splits it among them, so its sum is what the tree really takes. Both are reported.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import psutil

MIB = 1 << 20
TORCH_LIBRARY = "libtorch_cpu"


def process_role(proc: psutil.Process) -> str:
    """Ray's process title for workers (ray::ServeReplica:app:Router), else the program."""
    try:
        cmdline = proc.cmdline()
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return proc.name()
    if not cmdline:
        return proc.name()
    if cmdline[0].startswith("ray::"):
        return cmdline[0].split()[0]
    scripts = [os.path.basename(a) for a in cmdline[1:] if a.endswith(".py")]
    return os.path.basename(cmdline[0]) + (f" {scripts[0]}" if scripts else "")


def loads_torch(proc: psutil.Process) -> bool:
    """Whether the process has torch's native library mapped (i.e. imported torch)."""
    return any(TORCH_LIBRARY in m.path for m in proc.memory_maps(grouped=True))


def runtime_memory(
    root_pid: int | None = None, include_root: bool = True, exclude: Sequence[int] = ()
) -> dict[str, Any]:
    """Total RSS and PSS (MiB) of `root_pid` (default: this process) and its descendants,
    with one row per process (role, RSS, PSS, whether it loaded torch), largest first.
    `include_root=False` leaves out the root, e.g. a benchmark driver's own in-process engine;
    `exclude` leaves out those processes and theirs (servers a benchmark started beside Ray)."""
    root = psutil.Process(root_pid or os.getpid())
    skipped = set(exclude)
    for pid in exclude:
        try:
            skipped |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            continue
    procs = ([root] if include_root else []) + root.children(recursive=True)
    rows = []
    for proc in (p for p in procs if p.pid not in skipped):
        try:
            info = proc.memory_full_info()
            rows.append(
                {
                    "pid": proc.pid,
                    "role": process_role(proc),
                    "rss_mib": round(info.rss / MIB, 1),
                    "pss_mib": round(info.pss / MIB, 1),
                    "torch": loads_torch(proc),
                }
            )
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue  # ended while we looked (it holds nothing now), or not ours to read
    rows.sort(key=lambda r: -r["rss_mib"])
    return {
        "rss_mib": round(sum(r["rss_mib"] for r in rows), 1),
        "pss_mib": round(sum(r["pss_mib"] for r in rows), 1),
        "processes_with_torch": sum(r["torch"] for r in rows),
        "processes": rows,
    }
