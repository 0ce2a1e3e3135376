"""Every metric ragindex exports, and how a node's processes are scraped as one.

Names follow Prometheus' conventions (base units, `_total`, `_seconds`, `_bytes`) and every
label set is bounded: stages, hops and steps are fixed names, partitions and shards are the
spec's; no tenant, query or document ever becomes a label.

One registry per process, made on first use (`instruments()`). A Serve replica calls
`setup_process(role, directory)` first thing: its metrics are then kept in memory-mapped files
in `directory` (prometheus_client's multiprocess mode), one directory per Ray node, so that
one exposition (`exposition()`, or the pod's metrics port) reads every process of the node:
the embedded runtime's `/metrics` shows the Router, Ingest and every view at once, and each
cluster pod serves all its replicas' metrics on `RAGINDEX_METRICS_PORT` (whichever replica
of the pod binds it first; another takes over within HOUSEKEEPING_S if it goes). Counters and
histograms of the node's processes add up (a pod's totals; Prometheus adds the pod label);
gauges say how they combine (`multiprocess_mode`: the slowest view replica's applied offset,
the largest staleness, the sum of a role's memory), over the live processes only.

Recording costs a dict lookup and a float add under an uncontended lock (in multiprocess mode a
write into the mapped page): no I/O and no waiting on the query path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
    values,
)
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from ragindex.telemetry_names import METRICS_DIR_ENV, METRICS_PORT_ENV

log = logging.getLogger("ragindex.telemetry")

__all__ = ["METRICS_DIR_ENV", "METRICS_PORT_ENV"]  # re-exported for the Serve app
HOUSEKEEPING_S = 5.0  # memory gauge, the pod port's takeover
END_OFFSETS_EVERY_S = 5.0  # how often a view or Ingest asks the log for its end offsets

# The query path's stages (router.query's `timings_ms` keys; `legs_wall`: the overlapped
# legs' wall time) and the answer step; any other key is not exported (bounded labels).
QUERY_STAGES = (
    "embed",
    "dense",
    "rocchio",
    "lexical",
    "legs_wall",
    "fusion",
    "fetch",
    "rerank",
    "answer",
)
HOP_PARTS = ("round_trip", "queued", "service")
MODES = ("hybrid", "dense", "lexical")
INGEST_STEPS = ("read", "plan", "embed", "commit")
SECONDS_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
COUNT_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


@dataclass(frozen=True)
class Instruments:
    """The process's metrics (names in each field's comment)."""

    registry: CollectorRegistry
    # HTTP (router.middleware): every request by matched route and status
    http_requests: Counter  # ragindex_http_requests_total{route,status}
    http_latency: Histogram  # ragindex_http_request_seconds{route}
    # the query path (router.http, from each result's timings)
    query_stage: Histogram  # ragindex_query_stage_seconds{stage}
    query_hop: Histogram  # ragindex_query_hop_seconds{hop,part}
    search_hits: Histogram  # ragindex_search_hits{mode}: hits returned per search
    search_degraded: Counter  # ragindex_search_degraded_total{mode}: a leg was unavailable
    answers: Counter  # ragindex_answers_total{outcome}: answered or refused
    admission_refused: Counter  # ragindex_admission_refused_total{reason}: each 429
    # the views of `chunks.<generation>` (dense shards, BM25), per chunks partition
    view_applied: Gauge  # ragindex_view_applied_offset{view,partition} (slowest replica)
    view_end: Gauge  # ragindex_view_end_offset{view,partition}
    view_freshness: Gauge  # ragindex_view_freshness_seconds{view,partition} (largest)
    # the write path
    ingest_documents: Counter  # ragindex_ingest_documents_total: docs records consumed
    ingest_chunks: Counter  # ragindex_ingest_chunks_embedded_total: new or changed chunks
    ingest_embed_batch: Histogram  # ragindex_ingest_embed_batch_size: chunks per batch
    ingest_step: Histogram  # ragindex_ingest_batch_step_seconds{step}
    ingest_lag: Gauge  # ragindex_ingest_consumer_lag_records{partition} (docs partition)
    ingest_committed: Gauge  # ragindex_ingest_committed_offset{partition}
    log_end: Gauge  # ragindex_log_end_offset{topic,partition}: topic is `docs` or `chunks`
    log_append: Histogram  # ragindex_log_append_seconds{topic}
    log_append_failures: Counter  # ragindex_log_append_failures_total{topic}
    # generations (the build report the operator promotes on)
    generation_records: Gauge  # ragindex_generation_backfill_records{kind}: consumed, end
    generation_check: Gauge  # ragindex_generation_check_passed{check}: 1 passed, 0 not
    generation_phase: Gauge  # ragindex_generation_phase{phase}: 1 for the phase it is in
    # processes
    memory: Gauge  # ragindex_process_resident_memory_bytes{role} (sum over the role's)
    processes: Gauge  # ragindex_processes{role}


def _make(registry: CollectorRegistry) -> Instruments:
    r = registry

    def live(mode: str) -> Any:
        return {"registry": r, "multiprocess_mode": mode}

    return Instruments(
        registry=r,
        http_requests=Counter(
            "ragindex_http_requests",
            "HTTP requests by matched route and status.",
            ["route", "status"],
            registry=r,
        ),
        http_latency=Histogram(
            "ragindex_http_request_seconds",
            "HTTP request latency in this replica, by matched route.",
            ["route"],
            registry=r,
            buckets=HTTP_BUCKETS,
        ),
        query_stage=Histogram(
            "ragindex_query_stage_seconds",
            "Time of each query stage (embed, dense, lexical, fusion, fetch, rerank, answer;"
            " legs_wall: the overlapped legs' wall time).",
            ["stage"],
            registry=r,
            buckets=SECONDS_BUCKETS,
        ),
        query_hop=Histogram(
            "ragindex_query_hop_seconds",
            "Calls from the Router to other replicas per search: the round trip, the time"
            " queued there and the service there.",
            ["hop", "part"],
            registry=r,
            buckets=SECONDS_BUCKETS,
        ),
        search_hits=Histogram(
            "ragindex_search_hits",
            "Hits returned per search, by mode.",
            ["mode"],
            registry=r,
            buckets=COUNT_BUCKETS,
        ),
        search_degraded=Counter(
            "ragindex_search_degraded",
            "Searches answered without a leg that was unavailable (dense-only results).",
            ["mode"],
            registry=r,
        ),
        answers=Counter(
            "ragindex_answers",
            "Answers by outcome (answered, refused).",
            ["outcome"],
            registry=r,
        ),
        admission_refused=Counter(
            "ragindex_admission_refused",
            "Requests refused with 429 by a tenant's limits, by reason (concurrency, rate).",
            ["reason"],
            registry=r,
        ),
        view_applied=Gauge(
            "ragindex_view_applied_offset",
            "The chunks offset a view applied up to, per partition (the slowest replica).",
            ["view", "partition"],
            **live("livemin"),
        ),
        view_end=Gauge(
            "ragindex_view_end_offset",
            "The end offset of the chunks partition as the view last asked the log (Kafka's"
            " transaction markers take offsets: a current view may sit below it).",
            ["view", "partition"],
            **live("livemax"),
        ),
        view_freshness=Gauge(
            "ragindex_view_freshness_seconds",
            "How stale a view may be: seconds since it last held everything the log had"
            " (0 while it keeps up; the largest over replicas).",
            ["view", "partition"],
            **live("livemax"),
        ),
        ingest_documents=Counter(
            "ragindex_ingest_documents",
            "docs records (documents and tombstones) the ingest workers consumed.",
            registry=r,
        ),
        ingest_chunks=Counter(
            "ragindex_ingest_chunks_embedded",
            "Chunks the ingest workers embedded (new or changed only).",
            registry=r,
        ),
        ingest_embed_batch=Histogram(
            "ragindex_ingest_embed_batch_size",
            "Chunks embedded per ingest batch.",
            registry=r,
            buckets=COUNT_BUCKETS,
        ),
        ingest_step=Histogram(
            "ragindex_ingest_batch_step_seconds",
            "Time of each step of an ingest batch (read, plan, embed, commit).",
            ["step"],
            registry=r,
            buckets=SECONDS_BUCKETS,
        ),
        ingest_lag=Gauge(
            "ragindex_ingest_consumer_lag_records",
            "docs records not yet consumed, per partition (end offset less committed).",
            ["partition"],
            **live("livesum"),
        ),
        ingest_committed=Gauge(
            "ragindex_ingest_committed_offset",
            "The docs offset the ingest workers committed, per partition.",
            ["partition"],
            **live("livemax"),
        ),
        log_end=Gauge(
            "ragindex_log_end_offset",
            "End offset of a log partition (topic: docs or chunks).",
            ["topic", "partition"],
            **live("livemax"),
        ),
        log_append=Histogram(
            "ragindex_log_append_seconds",
            "Time to append a batch of records to the log until durable.",
            ["topic"],
            registry=r,
            buckets=SECONDS_BUCKETS,
        ),
        log_append_failures=Counter(
            "ragindex_log_append_failures",
            "Appends the log did not take (nothing acknowledged).",
            ["topic"],
            registry=r,
        ),
        generation_records=Gauge(
            "ragindex_generation_backfill_records",
            "The serving generation's backfill: docs records consumed and in the log (end).",
            ["kind"],
            **live("livemax"),
        ),
        generation_check=Gauge(
            "ragindex_generation_check_passed",
            "Whether each promotion check of the generation passed (1) or not (0).",
            ["check"],
            **live("livemin"),
        ),
        generation_phase=Gauge(
            "ragindex_generation_phase",
            "The generation's build phase as its last build report found it: 1 for the phase"
            " it is in (backfilling, verifying, passed, failed), 0 for the others.",
            ["phase"],
            **live("livemax"),
        ),
        memory=Gauge(
            "ragindex_process_resident_memory_bytes",
            "Resident memory of ragindex's processes by role (summed over the role's).",
            ["role"],
            **live("livesum"),
        ),
        processes=Gauge(
            "ragindex_processes",
            "ragindex's processes by role.",
            ["role"],
            **live("livesum"),
        ),
    )


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.instruments: Instruments | None = None
        self.directory: Path | None = None
        self.role: str | None = None
        self.port: int | None = None
        self.serving = False
        self.housekeeper: threading.Thread | None = None
        self.fresh_since: dict[tuple[str, int], float] = {}
        self.view_ends: dict[tuple[str, int], int] = {}


_state = _State()


def instruments() -> Instruments:
    """This process's metrics, made on first use (after `setup_process` in a replica)."""
    made = _state.instruments
    if made is None:
        with _state.lock:
            if _state.instruments is None:
                _state.instruments = _make(CollectorRegistry(auto_describe=True))
            made = _state.instruments
    return made


def setup_process(role: str, directory: Path | None = None, port: int | None = None) -> None:
    """Name this process's role (`ragindex_processes`, memory), and, with `directory`, keep its
    metrics there for the node's exposition; with `port` (or `RAGINDEX_METRICS_PORT`), serve
    the node's metrics there (whichever process of the pod binds it). Call before any metric
    is recorded: one made earlier stays in this process's memory only (it is said in the log)."""
    with _state.lock:
        if directory is not None and _state.directory is None:
            if _state.instruments is not None:
                log.warning("metrics were made before setup: they are not in %s", directory)
            else:
                directory.mkdir(parents=True, exist_ok=True)
                os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
                values.ValueClass = values.MultiProcessValue()
                _state.directory = directory
        _state.role = role
        env_port = os.environ.get(METRICS_PORT_ENV)
        _state.port = port if port is not None else (int(env_port) if env_port else None)
    made = instruments()
    made.processes.labels(role).set(1)
    _housekeeping_once()
    with _state.lock:
        if _state.housekeeper is None:
            _state.housekeeper = threading.Thread(
                target=_housekeeping, name="ragindex-metrics", daemon=True
            )
            _state.housekeeper.start()


def node_directory() -> Path | None:
    """Where this process's metrics are kept (None: in memory)."""
    return _state.directory


class _NodeCollector(Collector):
    """Every live or finished process's metrics in one node directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._collector = MultiProcessCollector(None, path=str(directory))

    def collect(self) -> Iterator[Any]:
        _forget_dead(self.directory)
        return iter(list(self._collector.collect()))


def _forget_dead(directory: Path) -> None:
    """Drop the live-mode gauges of processes that have exited (their counts stay)."""
    pids: set[int] = set()
    for path in directory.glob("gauge_live*_*.db"):
        with contextlib.suppress(ValueError):
            pids.add(int(path.stem.rsplit("_", 1)[1]))
    for pid in pids:
        if not psutil.pid_exists(pid):
            with contextlib.suppress(OSError):
                mark_process_dead(pid, str(directory))


def _writers(directory: Path) -> set[int] | None:
    """The processes whose metrics files (`<kind>_<pid>.db`) are in `directory`; None when it
    holds anything else (then it is not a node directory to remove)."""
    pids: set[int] = set()
    for path in directory.iterdir():
        stem, _, pid = path.stem.rpartition("_")
        if path.suffix != ".db" or not stem or not pid.isdigit():
            return None
        pids.add(int(pid))
    return pids


def remove_dead_node_dirs(base: Path, keep: Path) -> list[Path]:
    """Remove the node directories under `base`, other than `keep`, whose every process has
    exited: what stopped Ray nodes left (a node's directory is named by its node id, new at
    each start, so no exposition reads them again). An empty directory, one a live process
    writes, or one with other files is left. Returns the directories removed."""
    removed = []
    for directory in sorted(base.iterdir()) if base.is_dir() else []:
        if directory == keep or not directory.is_dir():
            continue
        pids = _writers(directory)
        if not pids or any(psutil.pid_exists(pid) for pid in pids):
            continue
        shutil.rmtree(directory, ignore_errors=True)  # another replica may be removing it too
        removed.append(directory)
    return removed


def _source() -> Collector:
    directory = _state.directory
    return _NodeCollector(directory) if directory is not None else instruments().registry


def exposition() -> bytes:
    """The Prometheus text of this node's processes (in memory: this process's)."""
    _record_memory()
    return generate_latest(_source())


def _record_memory() -> None:
    role = _state.role
    if role is not None:
        with contextlib.suppress(psutil.Error):
            instruments().memory.labels(role).set(psutil.Process().memory_info().rss)


def _housekeeping_once() -> None:
    _record_memory()
    port = _state.port
    if port is None or _state.serving:
        return
    try:
        start_http_server(port, addr="0.0.0.0", registry=_source())
    except OSError:
        return  # another process of this pod serves it; taken over if it goes
    _state.serving = True
    log.info("serving this pod's metrics on port %d", port)


def _housekeeping() -> None:
    while True:
        time.sleep(HOUSEKEEPING_S)
        try:
            _housekeeping_once()
        except Exception:  # metrics never stop a replica
            log.exception("metrics housekeeping failed")


# ------------------------------------------------------------------ recording helpers

_children: dict[tuple[str, ...], Any] = {}


def _child(metric: Any, *labels: str) -> Any:
    """`metric.labels(*labels)`, looked up without the metric's lock after the first time."""
    key = (metric._name, *labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


def observe_http(route: str, status: int, seconds: float) -> None:
    """One HTTP request, by its matched route (a template, never the raw path)."""
    made = instruments()
    _child(made.http_requests, route, str(status)).inc()
    _child(made.http_latency, route).observe(seconds)


def observe_search(
    mode: str,
    timings_ms: Mapping[str, float],
    hops_ms: Mapping[str, float],
    hits: int,
    degraded: bool,
) -> None:
    """One search's stage timings, its hops (`<hop>.<part>` milliseconds) and outcome."""
    made = instruments()
    for stage, ms in timings_ms.items():
        if stage in QUERY_STAGES:
            _child(made.query_stage, stage).observe(ms / 1000)
    for key, ms in hops_ms.items():
        hop, _, part = key.rpartition(".")
        if hop and part in HOP_PARTS:
            _child(made.query_hop, hop, part).observe(ms / 1000)
    if mode in MODES:
        _child(made.search_hits, mode).observe(hits)
        if degraded:
            _child(made.search_degraded, mode).inc()


def observe_view(
    view: str,
    offsets: Mapping[int, int],
    *,
    current_at: float | None,
    ends: Mapping[int, int] | None = None,
    now: float | None = None,
) -> None:
    """A view's applied offsets per partition after a catch-up. `current_at`: the wall time
    (time.time()) from which it held everything the log had (its last read to the end), None
    when it did not reach the end; `ends`: the partitions' end offsets, when just asked."""
    made = instruments()
    now = time.time() if now is None else now
    for partition, applied in offsets.items():
        p = str(partition)
        _child(made.view_applied, view, p).set(applied)
        key = (view, partition)
        # the end as last asked; a view that read to the end has seen at least its offset
        end = ends[partition] if ends is not None and partition in ends else None
        if current_at is not None:
            end = max(end if end is not None else 0, _state.view_ends.get(key, 0), applied)
        if end is not None and end != _state.view_ends.get(key):
            _state.view_ends[key] = end
            _child(made.view_end, view, p).set(end)
        if current_at is not None:
            _state.fresh_since[key] = current_at
        since = _state.fresh_since.setdefault(key, now)
        _child(made.view_freshness, view, p).set(max(0.0, now - since))


GENERATION_PHASES = ("backfilling", "verifying", "passed", "failed")


def observe_generation(
    consumed: int, end: int, checks: Mapping[str, str] | None, waiting_on: bool
) -> None:
    """A build report (ragindex.generations.BuildReport): its backfill and phase."""
    made = instruments()
    made.generation_records.labels("consumed").set(consumed)
    made.generation_records.labels("end").set(end)
    if checks is None:
        phase = "verifying" if waiting_on else "backfilling"
    else:
        phase = "failed" if any(checks.values()) else "passed"
        for check, why in checks.items():
            made.generation_check.labels(check).set(0 if why else 1)
    for name in GENERATION_PHASES:
        made.generation_phase.labels(name).set(1 if name == phase else 0)


def forget_metrics_state() -> None:
    """For tests of this module: forget the process's metrics (the next use makes new ones)."""
    with _state.lock:
        _state.instruments = None
        _state.fresh_since.clear()
        _state.view_ends.clear()
        _children.clear()
