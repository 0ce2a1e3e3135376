"""release_free_heap: what a burst of work freed goes back to the OS (#16)."""

from __future__ import annotations

import subprocess
import sys

# 4 KB blocks come from glibc's heap (not pymalloc's arenas); the one kept at the end pins
# the heap's top, so glibc's own trimming of the top cannot give the freed blocks back.
CHILD = """
import psutil
from ragindex.app.serve.threads import release_free_heap
blocks = [bytes(4000) + bytes([i % 256]) for i in range(50_000)]
pin = bytes(4000) + b"pin"
del blocks
before = psutil.Process().memory_info().rss
assert release_free_heap()
after = psutil.Process().memory_info().rss
print((before - after) >> 20)
"""


def test_freed_heap_goes_back_to_the_os() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    assert int(out.stdout.strip()) >= 100, out.stdout  # ~190 MiB were freed
