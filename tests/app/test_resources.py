"""runtime_memory: the process tree's RSS/PSS, per process, and which processes loaded torch."""

from __future__ import annotations

import subprocess
import sys

import psutil

from ragindex.app import runtime_memory

# The child sleeps until the test kills it.
CHILD = "import sys, time\n{imports}\nprint('ready', flush=True)\ntime.sleep(900)\n"


def _child(imports: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(imports=imports)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_it_sums_the_tree_and_sees_torch() -> None:
    plain, with_torch = _child("import json"), _child("import torch")
    try:
        whole = runtime_memory()
        children = runtime_memory(include_root=False)
        rows = {r["pid"]: r for r in children["processes"]}
        assert {plain.pid, with_torch.pid} <= set(rows)
        assert not rows[plain.pid]["torch"] and rows[with_torch.pid]["torch"]
        assert rows[with_torch.pid]["rss_mib"] > rows[plain.pid]["rss_mib"] > 1
        assert whole["rss_mib"] > children["rss_mib"] >= children["pss_mib"] > 0
        assert len(whole["processes"]) == len(children["processes"]) + 1
        assert rows[plain.pid]["role"] == "python"  # no script: the program's name
    finally:
        for proc in (plain, with_torch):
            proc.kill()
            proc.wait(timeout=10)


def test_excluded_processes_and_theirs_are_left_out() -> None:
    # a child that started a grandchild: excluding the child leaves out both
    parent = _child(
        "import subprocess\n"
        "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(900)'])"
    )
    try:
        # Only this test's subtree counts: other tests may have left children of their own.
        subtree = {parent.pid} | {
            c.pid for c in psutil.Process(parent.pid).children(recursive=True)
        }
        seen = {r["pid"] for r in runtime_memory(include_root=False)["processes"]}
        assert len(subtree) >= 2 and subtree <= seen
        left = runtime_memory(include_root=False, exclude=[parent.pid])["processes"]
        assert not {r["pid"] for r in left} & subtree
    finally:
        for grandchild in psutil.Process(parent.pid).children():
            grandchild.kill()
        parent.kill()
        parent.wait(timeout=10)
