"""`bench serve`'s ingest measurement: documents/s through the API against the raw embedder
on the same passages, round by round, with where the time and the runtime's CPU went."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import psutil

from ragindex.measure.bench.serve_corpus import synthetic_text
from ragindex.protocols import Embedder

INGEST_DOCS = 96


INGEST_BATCH = 32  # what a client like `ragindex demo` sends


INGEST_WAITS = 10


def ingest_texts(rng: np.random.Generator, round_: int) -> list[str]:
    """Round `round_`'s documents: new ones every round, so each embeds all of them."""
    first = 10_000_000 + round_ * INGEST_DOCS
    return [synthetic_text(rng, first + i, words=150) for i in range(INGEST_DOCS)]


def raw_embed_rate(embedder: Embedder, texts: list[str]) -> float:
    embedder.embed_passages(texts[:8])
    start = time.perf_counter()
    embedder.embed_passages(texts)
    return len(texts) / (time.perf_counter() - start)


def raw_embed_rate_at_niceness(embedder: Embedder, texts: list[str], niceness: int) -> float:
    """`raw_embed_rate` on a thread of its own at `niceness` (Linux sets it per thread; one
    intra-op thread embeds on the calling one). The cluster layout's replicas run at Ray's
    niceness 15 while this process runs at 0: at 0 the raw rate takes the cores ahead of the
    runtime's own background work, which the embedder pool shares them with. Measured at the
    pool's niceness it tells that share apart from what the write path itself costs."""

    def measure() -> float:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
        return raw_embed_rate(embedder, texts)

    # a thread of its own: its niceness goes with it when the pool shuts down
    with ThreadPoolExecutor(1, thread_name_prefix="raw-embed-at-niceness") as pool:
        return pool.submit(measure).result()


@dataclass(frozen=True)
class IngestRun:
    """One pass of documents through the API until searchable (`api_ingest_rate`)."""

    docs: int
    started_at: float  # wall clock (time.time()) when the first batch was sent
    acked_at: list[float]  # when each POST answered (the last one: with `?wait=true`)
    applied_at: float  # when the wait answered `applied: true`

    @property
    def docs_per_s(self) -> float:
        return self.docs / (self.applied_at - self.started_at)


def api_ingest_rate(client: httpx.Client, texts: list[str], prefix: str = "i") -> IngestRun:
    """Documents/s through the API to searchable: batches as a client sends them, the last
    one with `?wait=true` (writes are applied in log order, so it waits for them all)."""
    docs = [
        {"source": "ingest", "doc_id": f"{prefix}{i}", "title": "", "text": t}
        for i, t in enumerate(texts)
    ]
    batches = [docs[b : b + INGEST_BATCH] for b in range(0, len(docs), INGEST_BATCH)]
    acked: list[float] = []
    start = time.time()
    for batch in batches[:-1]:
        client.post("/v1/documents", json={"documents": batch}).raise_for_status()
        acked.append(time.time())
    for _ in range(INGEST_WAITS):  # re-sending unchanged documents embeds nothing
        r = client.post(
            "/v1/documents",
            json={"documents": batches[-1]},
            params={"wait": "true", "wait_timeout_s": "60"},
        )
        r.raise_for_status()
        if r.json()["applied"] is True:
            done = time.time()
            return IngestRun(len(docs), start, [*acked, done], done)
    raise TimeoutError(f"ingested documents not searchable after {INGEST_WAITS} waits of 60 s")


def ingest_rounds(
    client: httpx.Client,
    embedder: Embedder,
    rounds: list[list[str]],
    warmup: list[str],
    exclude: Sequence[int],
    replica_niceness: int | None,
) -> list[dict[str, Any]]:
    """Ingest throughput through the API against the raw embedder's on the same passages,
    taking turns round by round (a round's documents are new), after one warm-up of each side
    on documents of the same kind. On this box two 5 s measurements of the same work differ
    by up to ~11 %, as much as the gap measured: one pair would be as much luck as signal.
    Each round: the API run's rate, CPU per document and timeline, then the raw rate (and, given
    `replica_niceness`, the raw rate at the replicas' niceness)."""
    api_ingest_rate(client, warmup, prefix="warmup")
    out = []
    for n, texts in enumerate(rounds):
        cpu_before = runtime_cpu_s(exclude)
        run = api_ingest_rate(client, texts, prefix=f"r{n}-")
        cpu = cpu_per_doc(cpu_before, runtime_cpu_s(exclude), run.docs)
        timeline = ingest_timeline(run, ingest_traces())
        raw = raw_embed_rate(embedder, texts)
        result = {
            "api_docs_per_s": round(run.docs_per_s, 2),
            "raw_docs_per_s": round(raw, 2),
            "ratio": round(run.docs_per_s / raw, 3),
        }
        if replica_niceness is not None:
            raw_nice = raw_embed_rate_at_niceness(embedder, texts, replica_niceness)
            result["raw_docs_per_s_at_replica_niceness"] = round(raw_nice, 2)
            result["ratio_at_replica_niceness"] = round(run.docs_per_s / raw_nice, 3)
        out.append(result | {"cpu_ms_per_doc": cpu, "timeline": timeline})
    return out


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose ratio is the median (the lower middle of an even count)."""
    ranked = sorted(rounds, key=lambda r: r["ratio"])
    return ranked[(len(ranked) - 1) // 2]


def ingest_timeline(run: IngestRun, traces: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the time of an ingest run went, in seconds from its first POST: each POST's
    answer, each ingest batch of the worker (read, chunked and diffed, embedded, committed)
    and the wait's answer; `read_s`, `chunk_s`, `embed_s` and `commit_s` sum the batches'
    steps, `applied_after_commit_s` is the last commit to `applied: true` (the views'
    catch-up and the wait noticing it)."""
    mine = [t for t in traces if t["committed_at"] >= run.started_at]

    def at(t: float) -> float:
        return round(t - run.started_at, 3)

    last_commit = max((t["committed_at"] for t in mine), default=run.started_at)
    return {
        "posts_acked_s": [at(t) for t in run.acked_at],
        "batches": [
            {
                "records": t["records"],
                "partitions": len(t["partitions"]),
                "embedded": t["embedded"],
                "started_s": at(t["started_at"]),
                "read_s": at(t["read_at"]),
                "planned_s": at(t["planned_at"]),
                "embedded_s": at(t["embedded_at"]),
                "committed_s": at(t["committed_at"]),
            }
            for t in mine
        ],
        "read_s": round(sum(t["read_at"] - t["started_at"] for t in mine), 3),
        "chunk_s": round(sum(t["planned_at"] - t["read_at"] for t in mine), 3),
        "embed_s": round(sum(t["embedded_at"] - t["planned_at"] for t in mine), 3),
        "commit_s": round(sum(t["committed_at"] - t["embedded_at"] for t in mine), 3),
        "applied_after_commit_s": round(run.applied_at - last_commit, 3),
        "applied_s": at(run.applied_at),
    }


def runtime_cpu_s(exclude: Sequence[int] = ()) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) so far of every process of the runtime (this process and
    all it spawned: Ray's and the app's), by pid, with its role."""

    from ragindex.app.resources import process_role

    root = psutil.Process()
    out: dict[int, tuple[str, float]] = {}
    for proc in [root, *root.children(recursive=True)]:
        if proc.pid in exclude:
            continue
        try:
            times = proc.cpu_times()
            out[proc.pid] = (process_role(proc), times.user + times.system)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return out


def cpu_per_doc(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], docs: float
) -> dict[str, float]:
    """CPU milliseconds per document (or per second, given seconds) each role of the runtime
    spent between two samples (replicas of one deployment summed under its role), largest
    first; `total` of all."""
    spent: dict[str, float] = {}
    for pid, (role, cpu) in after.items():
        start = before.get(pid, (role, 0.0))[1]
        name = role.removeprefix("ray::ServeReplica:").removeprefix("ray::")
        spent[name] = spent.get(name, 0.0) + max(cpu - start, 0.0)
    rows = {k: round(1000 * v / docs, 1) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}
    return {k: v for k, v in rows.items() if v >= 0.1} | {
        "total": round(1000 * sum(spent.values()) / docs, 1)
    }


def ingest_traces() -> list[dict[str, Any]]:
    """The Ingest replicas' latest batch traces (this process is the app's Ray driver)."""
    from ray import serve

    from ragindex.app import APP_NAME
    from ragindex.serve_config import INGEST

    handle = serve.get_deployment_handle(INGEST, app_name=APP_NAME)
    traces: list[dict[str, Any]] = handle.batch_traces.remote().result()
    return traces
