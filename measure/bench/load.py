"""Load for `bench serve`: saturation throughput under closed-loop clients, and the memory the
runtime's processes hold.

Saturation: 1, 2, 4, 8 closed-loop clients (each sends its next search when the last one
answered), each level for a fixed time, every query unique; the throughput at a level is what
was answered per second, and the saturation throughput is the highest one among the levels
before the first whose p99 passed the bound (None when the first did). The clients share the
server's cores, so they are plain keep-alive HTTP/1.1 connections (`SearchClient`: 0.4-0.7 ms of
this process's CPU a search here, where httpx's client took 1.5), and each level reports the CPU
this process spent per search.

Memory: resident set sizes (and proportional set sizes, which count a shared page once) of
every process the runtime started, one row each: Ray's own (GCS, raylet, agents, the
dashboard when on) and Serve's (controller, proxy, our replicas), i.e. every descendant of this
process but those named to exclude (servers the benchmark started beside Ray:
Elasticsearch, Kafka).
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

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


class SearchClient:
    """One keep-alive HTTP/1.1 connection that posts JSON and reads the whole answer: the least
    CPU a load client can spend on the server's cores (a refused or failed request raises
    OSError or http.client.HTTPException; the next request reconnects)."""

    def __init__(self, url: str, token: str, timeout_s: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"SearchClient speaks plain http://host:port, got {url!r}")
        self._connection = http.client.HTTPConnection(
            parts.hostname, parts.port or 80, timeout=timeout_s
        )
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: dict[str, Any]) -> None:
        try:
            self._connection.request("POST", path, json.dumps(body), self._headers)
            answer = self._connection.getresponse()
            answer.read()
        except (OSError, http.client.HTTPException):
            self._connection.close()
            raise
        if answer.status >= 400:
            raise http.client.HTTPException(f"{path} answered {answer.status}")

    def close(self) -> None:
        self._connection.close()


def closed_loop(
    make_client: Callable[[], SearchClient],
    queries: Iterator[str],
    clients: int,
    seconds: float,
    body: Callable[[str], dict[str, Any]],
) -> dict[str, Any]:
    """`clients` threads each searching back to back for `seconds`; qps, p50, p99, errors, and
    the CPU this process (the clients) spent per answered search."""
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds
    latencies: list[float] = []
    errors = 0

    def next_query() -> str:
        with lock:
            return next(queries)

    def loop() -> None:
        nonlocal errors
        client = make_client()
        try:
            while time.perf_counter() < stop_at:
                q = next_query()
                start = time.perf_counter()
                try:
                    client.post("/v1/search", body(q))
                except (OSError, http.client.HTTPException):
                    with lock:
                        errors += 1
                    continue
                took = (time.perf_counter() - start) * 1000
                with lock:
                    latencies.append(took)
        finally:
            client.close()

    started, cpu_from = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(loop) for _ in range(clients)]:
            future.result()
    elapsed, cpu_s = time.perf_counter() - started, time.process_time() - cpu_from
    return {
        "clients": clients,
        "answered": len(latencies),
        "errors": errors,
        "qps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 50), 2) if latencies else float("inf"),
        "p99_ms": round(percentile(latencies, 99), 2) if latencies else float("inf"),
        "client_cpu_ms_per_search": round(cpu_s * 1000 / len(latencies), 2) if latencies else None,
    }


def ramp(
    make_client: Callable[[], SearchClient],
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
