"""Load for `bench serve`: saturation throughput under closed-loop clients, and the memory the
runtime's processes hold.

Saturation: 1, 2, 4, 8 closed-loop clients (each sends its next search when the last one
answered), each level for a fixed time, every query unique; the throughput at a level is what
was answered per second, and the saturation throughput is the highest one among the levels
before the first whose p99 passed the bound (None when the first did).

Memory: resident set sizes (and proportional set sizes, which count a shared page once) of
every process the runtime started, one row each: Ray's own (GCS, raylet, agents, the
dashboard when on) and Serve's (controller, proxy, our replicas), i.e. every descendant of this
process but those named to exclude (servers the benchmark started beside Ray:
Elasticsearch, Kafka).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx

from ragindex.app import runtime_memory
from ragindex.measure.stats import percentile

P99_BOUND_MS = 40.0
LEVEL_S = 5.0
CLIENT_LEVELS = (1, 2, 4, 8)


def saturation_qps(levels: Sequence[dict[str, Any]], p99_bound_ms: float) -> float | None:
    """The highest throughput of a level whose p99 stayed within the bound, among the levels
    before the first one that passed it (None when even the first passed it)."""
    best = None
    for level in levels:
        if level["p99_ms"] > p99_bound_ms:
            break
        best = max(best or 0.0, level["qps"])
    return best


def closed_loop(
    make_client: Callable[[], httpx.Client],
    queries: Iterator[str],
    clients: int,
    seconds: float,
    body: Callable[[str], dict[str, Any]],
) -> dict[str, Any]:
    """`clients` threads each searching back to back for `seconds`; qps, p50, p99, errors."""
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds
    latencies: list[float] = []
    errors = 0

    def next_query() -> str:
        with lock:
            return next(queries)

    def loop() -> None:
        nonlocal errors
        with make_client() as client:
            while time.perf_counter() < stop_at:
                q = next_query()
                start = time.perf_counter()
                try:
                    client.post("/v1/search", json=body(q)).raise_for_status()
                except httpx.HTTPError:
                    with lock:
                        errors += 1
                    continue
                took = (time.perf_counter() - start) * 1000
                with lock:
                    latencies.append(took)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(loop) for _ in range(clients)]:
            future.result()
    elapsed = time.perf_counter() - started
    return {
        "clients": clients,
        "answered": len(latencies),
        "errors": errors,
        "qps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 50), 2) if latencies else float("inf"),
        "p99_ms": round(percentile(latencies, 99), 2) if latencies else float("inf"),
    }


def ramp(
    make_client: Callable[[], httpx.Client],
    queries: Iterator[str],
    body: Callable[[str], dict[str, Any]],
    on_level: Callable[[], None] = lambda: None,
    levels: Sequence[int] = CLIENT_LEVELS,
    seconds: float = LEVEL_S,
    p99_bound_ms: float = P99_BOUND_MS,
) -> dict[str, Any]:
    """Every closed-loop level (past the bound too: the table shows the knee); `on_level`
    runs while each level is under way (to sample memory under load)."""
    done: list[dict[str, Any]] = []
    for clients in levels:
        sampler = threading.Timer(seconds / 2, on_level)
        sampler.start()
        try:
            done.append(closed_loop(make_client, queries, clients, seconds, body))
        finally:
            sampler.cancel()
    return {
        "levels": done,
        "p99_bound_ms": p99_bound_ms,
        "saturation_qps": saturation_qps(done, p99_bound_ms),
    }


def served_memory(exclude: Sequence[int] = ()) -> dict[str, Any]:
    """The runtime's memory: every descendant of this process (the driver, which holds the
    benchmark's own in-process engine, is left out) but `exclude`'s trees, per process."""
    return runtime_memory(include_root=False, exclude=exclude)


class PeakMemory:
    """The largest served_memory seen over several samples (taken while under load)."""

    def __init__(self, exclude: Sequence[int] = ()) -> None:
        self.exclude = list(exclude)
        self.peak: dict[str, Any] = {}

    def sample(self) -> None:
        now = served_memory(self.exclude)
        if now["rss_mib"] > self.peak.get("rss_mib", -1.0):
            self.peak = now


@contextmanager
def timed_phase(name: str, into: dict[str, float]) -> Iterator[None]:
    """Seconds spent in a phase of the benchmark, for the report."""
    print(f"bench: {name.removesuffix('_s')} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        yield
    finally:
        into[name] = round(time.perf_counter() - start, 3)
        print(f"bench: {name} {into[name]}", file=sys.stderr, flush=True)
