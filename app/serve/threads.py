"""What every replica shares: one worker thread owning its index objects, one refresh loop.

Every replica runs its index and model work on ONE worker thread: FAISS and tantivy objects
are not shared across threads, and one intra-op thread per replica is what 2 cores sustain
(FIELD-NOTES).
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import ctypes.util
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

log = logging.getLogger("ragindex.serve")
T = TypeVar("T")

REFRESH_S = 0.15


def limit_threads() -> None:
    """One intra-op thread for this replica (FIELD-NOTES: 2 threads collapse under load).

    Torch is not imported for it: with the ONNX embedder the query path never loads torch.
    OMP_NUM_THREADS sizes the pool of a torch loaded later, and ONNX Runtime's sessions."""
    import faiss

    os.environ["OMP_NUM_THREADS"] = "1"
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)


def release_free_heap() -> bool:
    """Hand the C heap's free pages back to the OS (glibc's malloc_trim; False elsewhere).

    Replaying the log allocates and frees far more than a replica keeps (every record's
    vector and text pass through), and glibc keeps what was freed mapped: the replica's RSS
    stays at the replay's high-water mark. Call it when a burst of work is over, not per
    request (it walks the heap under malloc's lock)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    return bool(trim(0)) if trim is not None else False


class ReplicaThread:
    """A single thread that owns this replica's index objects; async callers await it."""

    def __init__(self, name: str, workers: int = 1) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the worker thread, in a copy of the caller's context (its request
        id and trace context, the search's hop log)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._pool, context.run, fn, *args)

    def call(self, fn: Callable[[], T]) -> T:
        """Run on the worker thread from sync code (shutdown), blocking."""
        return self._pool.submit(fn).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


async def refresh_forever(
    worker: ReplicaThread, refresh: Callable[[], bool | None], what: str
) -> None:
    """Apply the writer's new work every REFRESH_S, or at once again while `refresh` says more
    is waiting (each round is one task on the worker: other tasks run in between); a failed
    round is logged and retried, and the replica keeps serving what it has (readiness reports
    the staleness)."""
    while True:
        more = False
        try:
            more = bool(await worker.run(refresh))
        except Exception:
            log.exception(what)
        await asyncio.sleep(0 if more else REFRESH_S)


class LatestResult(Generic[T]):
    """A slow computation made in the background, one at a time: an ask starts one if none is
    running and waits up to `wait_s` for it; past that it gets the last result made (None
    before the first), and a later ask collects the new one. A computation outlives the ask
    that started it, so one slower than any asker's timeout still lands."""

    def __init__(self, make: Callable[[], Awaitable[T]], wait_s: float) -> None:
        self._make = make
        self.wait_s = wait_s
        self._job: asyncio.Future[T] | None = None
        self.last: T | None = None

    async def ask(self) -> T | None:
        if self._job is None:
            self._job = asyncio.ensure_future(self._make())
        job = self._job
        await asyncio.wait({job}, timeout=self.wait_s)
        if not job.done():
            return self.last
        if self._job is job:
            self._job = None
        self.last = job.result()  # a failed computation raises to its askers; the next starts anew
        return self.last
