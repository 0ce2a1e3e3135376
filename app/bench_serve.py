"""`ragindex bench serve`: what the Serve layer costs over the in-process engine, and under load.

One run, one corpus (synthetic text, synthetic clustered vectors, 2 shards), measured while the
app serves, each pair interleaved query by query so both sides see the same background load
on a noisy machine (ratios and differences from one run are the figures to trust):
- hybrid search p50/p99 through HTTP vs the same queries through the in-process engine (the
  Router's own query path, opened read-only in this process), their difference, and the HTTP
  searches' stages (embed, dense, lexical, fusion, fetch) with what HTTP adds split into the
  replica's share (its Server-Timing) and the proxy and network's;
- the like-for-like peer: ragindex lexical-only search through HTTP vs Elasticsearch BM25
  through HTTP (a real local Elasticsearch holding the same chunks), same queries, with the
  in-process lexical leg as the floor (bench_peer);
- upsert-to-searchable through HTTP (both legs), the freshness bound's measurement, and
  ack-to-applied everywhere (`?wait=true`: every shard replica of the answering Router and its
  BM25 view), `freshness_all_replicas_p99_s`;
- `bootstrap_s`: a new replica (a fresh node-local directory, nothing of its own) from the log
  to serving: the newest shard snapshots the app's replica published to the log (FAISS + text,
  `snapshot_published_s` after the app was ready), the chunks after them, and a replay of every
  chunk into its BM25 view; `bootstrap_snapshot_offsets` says where each shard's replay began
  (0: no snapshot was loaded, every chunk replayed);
- ingest throughput through the API vs the raw embedder on the same passages, in
  INGEST_ROUNDS rounds that take turns (new documents each round, both sides warmed up first;
  `ingest_rounds`), the median round reported (`ingest_ratio`), with where its time went
  (`ingest_timeline`: each POST's answer, each worker batch's read, chunk, embed and commit,
  the wait's answer) and the CPU per document of every runtime process during it
  (`ingest_cpu_ms_per_doc`, beside `idle_cpu_ms_per_s`, the same processes at rest); in the
  cluster layout also the raw embedder at the replicas' niceness
  (`ingest_ratio_at_replica_niceness`: what of the gap is the cores the pool shares with the
  runtime's own background work, not the write path);
- saturation throughput (closed-loop clients ramp; the queries/s at which p99 passes 40 ms)
  with 1 and then 2 Router replicas, and the RSS of the runtime's processes at rest and under
  load (bench_load).
Every timed query is unique and the warm-up queries are a set of their own, so no cache can
flatter a figure; the query-embedding cache's hit path is reported on its own
(`query_cache_hits`: a small set of queries repeated). The corpus goes into the log's `docs`
topic and through the real IngestWorker with passage vectors drawn synthetically (embedding
100 k passages would take hours on 2 cores); queries use the real model.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
import numpy as np
import psutil

from ragindex.app.bench_load import PeakMemory, ramp, served_memory, timed_phase
from ragindex.app.bench_peer import fill_elasticsearch, time_lexical_peer
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.measure import Goals, missed_goals, percentile, text_table
from ragindex.protocols import Embedder, Vectors
from ragindex.records import docs_records
from ragindex.router.auth import create_token
from ragindex.router.query import engine_ms
from ragindex.serve_config import KAFKA_BOOTSTRAP_ENV, Runtime
from ragindex.types import Document, ModelIdentity

if TYPE_CHECKING:  # Ray is imported only when the benchmark runs
    from ragindex.app.serve.query_side import LocalQuerySide

TENANT = "bench"
LogKind = Literal["file", "kafka"]
# What the serving path promises (`--check` exits 1 when a run misses one).
GOALS: Goals = {
    "http_p50_ms": ("<=", 15.0),
    "http_p99_ms": ("<=", 40.0),
    "http_minus_inproc_p50_ms": ("<=", 5.0),
    "lexical_http_over_es_http_p50": ("<", 1.0),
    "freshness_p99_s": ("<=", 2.0),
    "ingest_ratio": (">=", 0.9),
    "freshness_all_replicas_p99_s": ("<=", 2.0),
    "bootstrap_s": ("<=", 20.0),
    "runtime_rss_at_rest_mb": ("<=", 2500.0),  # the embedded runtime's; MiB, as psutil's
}
# the cluster layout on one machine runs every shard replica in a process of its own
CLUSTER_GOALS: Goals = {k: v for k, v in GOALS.items() if k != "runtime_rss_at_rest_mb"}
# 2 shards, one Router replica; per-tenant admission raised so that the one benchmark tenant's
# closed-loop clients measure the server, not the 429s of the default limits (50/s, 8 at once).
BENCH_SPEC = {
    "dense": {"shards": 2, "replicas": 1},
    "limits": {"requestsPerS": 1_000_000, "burst": 1_000_000, "maxConcurrent": 1_000},
}
LOAD_BATCH = 2_000
QUERIES = 200
WARMUP_QUERIES = 20
MIN_CHUNKS = 100
READY_STREAK = 20
FRESHNESS_PROBES = 20
CACHE_QUERIES = 10  # the repeated set that shows the query-embedding cache's hit path
CACHE_ROUNDS = 5
PORT_RELEASE_S = 60.0
INGEST_DOCS = 96
INGEST_BATCH = 32  # what a client like `ragindex demo` sends
INGEST_WAITS = 10
INGEST_ROUNDS = 3  # the API and the raw embedder take turns; the median round is reported
INGEST_WARMUP_DOCS = 8  # both sides embed this many documents of the same kind first
IDLE_SAMPLE_S = 5  # the runtime's CPU at rest is sampled this long before the ingest run

_WORDS_TEXT = (
    "wing flow shock boundary layer pressure heat transfer nozzle supersonic laminar turbulent"
    " blade rotor thermal stress panel buckling cylinder plate vortex wake drag lift mach"
    " reynolds number jet engine combustion fuel cooling radiation surface skin friction"
    " separation slender body cone hypersonic inlet diffuser compressor turbine vibration"
    " flutter damping load fatigue crack structure beam shell orbit satellite reentry ablation"
)
WORDS = _WORDS_TEXT.split()


def synthetic_text(rng: np.random.Generator, n: int, words: int = 40) -> str:
    picked = rng.choice(len(WORDS), size=words)
    return f"record {n} " + " ".join(WORDS[i] for i in picked)


def clustered_unit_vectors(
    rng: np.random.Generator, count: int, dim: int, centers: np.ndarray
) -> Vectors:
    """Unit vectors around random centres: closer to real embeddings than uniform noise."""
    which = rng.integers(0, len(centers), size=count)
    vecs = centers[which] + 0.35 * rng.standard_normal((count, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return np.ascontiguousarray(vecs, dtype=np.float32)


class SyntheticPassages:
    """The real model for queries and identity; synthetic vectors for the bulk-loaded passages."""

    def __init__(self, real: Embedder, seed: int = 7) -> None:
        self.real = real
        self.identity = real.identity
        self.max_seq_length = real.max_seq_length
        self._rng = np.random.default_rng(seed)
        dim = real.identity.dimension
        centers = self._rng.standard_normal((64, dim)).astype(np.float32)
        self._centers = centers / np.linalg.norm(centers, axis=1, keepdims=True)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return clustered_unit_vectors(self._rng, len(texts), self.identity.dimension, self._centers)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self.real.embed_queries(texts)

    def count_tokens(self, text: str) -> int:
        return len(text.split()) * 2  # synthetic words are 1-2 word pieces; one chunk each


def load_corpus(
    data_dir: Path, spec: RagIndexSpec, embedder: Embedder, chunks: int, rng: np.random.Generator
) -> None:
    """Append the corpus to `docs` and run the ingest worker over it, in this process."""
    from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, ensure_topics, open_log
    from ragindex.app.serve_cli import APP_NAME
    from ragindex.ingest.worker import IngestWorker
    from ragindex.topics import plane_topics

    topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
    log = open_log(data_dir)
    try:
        ensure_topics(log, topics)
        worker = IngestWorker(log, topics, embedder, spec.chunking, range(topics.docs_partitions))
        for start in range(0, chunks, LOAD_BATCH):
            docs = [
                Document("synth", f"d{n}", f"Synthetic {n}", synthetic_text(rng, n))
                for n in range(start, min(chunks, start + LOAD_BATCH))
            ]
            log.append(topics.docs, docs_records(TENANT, docs, topics.docs_partitions))
            while worker.poll(max_records=LOAD_BATCH):
                pass
    finally:
        log.close()  # the Ingest replica becomes the log's writer


READY_POLL_TIMEOUT_S = 10.0
READY_BASE_S = 300.0
READY_S_PER_1K_CHUNKS = 6.0  # a replay with HNSW builds on one thread of a loaded 2-core box


def ready_deadline_s(chunks: int) -> float:
    """How long the app may take to replay `chunks` into its views before the run gives up."""
    return READY_BASE_S + READY_S_PER_1K_CHUNKS * chunks / 1000


def wait_ready(client: httpx.Client, deadline_s: float) -> None:
    """Poll /readyz until 200; a slow or refused answer is retried until the overall deadline,
    and what the app says it is catching up is shown as it changes."""
    deadline = time.monotonic() + deadline_s
    said = ""
    while True:
        try:
            r = client.get("/readyz", timeout=READY_POLL_TIMEOUT_S)
            if r.status_code == 200:
                return
            detail = str(r.json().get("detail", r.text)) if r.content else str(r.status_code)
        except (httpx.TransportError, ValueError) as err:
            detail = f"no answer ({type(err).__name__})"
        if detail != said:
            print(f"waiting for the app: {detail}", file=sys.stderr, flush=True)
            said = detail
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Serve app was not ready after {deadline_s:.0f} s: {detail}")
        time.sleep(1.0)


def wait_snapshots_published(
    data_dir: Path, spec: RagIndexSpec, embedder_identity: ModelIdentity, deadline_s: float
) -> None:
    """Until the app's replica published a snapshot of every shard to the log (it does once
    its first replay is done), so that the new replica measured next can start from them."""
    from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, open_log, open_snapshot_log
    from ragindex.app.serve_cli import APP_NAME
    from ragindex.shards.snapshot_log import SnapshotTopic
    from ragindex.topics import plane_snapshots_topic

    topic = plane_snapshots_topic(spec, APP_NAME, DEFAULT_NAMESPACE)
    shards = spec.dense.shards
    log_ = open_log(data_dir)
    snapshots = open_snapshot_log(data_dir, log_)
    deadline = time.monotonic() + deadline_s
    try:
        while True:
            if all(
                SnapshotTopic(
                    snapshots, topic, s, shards, "", embedder_identity
                ).ends_with_manifest()
                for s in range(shards)
            ):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no snapshot of every shard in {topic} after {deadline_s:.0f} s"
                )
            time.sleep(0.5)
    finally:
        if snapshots is not log_:
            snapshots.close()
        log_.close()


def unique_queries(rng: np.random.Generator, count: int, taken: set[str]) -> list[str]:
    """`count` queries of 5 vocabulary words, none seen before (added to `taken`): no timed
    query can be answered from a cache that an earlier one warmed."""
    out: list[str] = []
    while len(out) < count:
        q = " ".join(rng.choice(WORDS, size=5, replace=False))
        if q not in taken:
            taken.add(q)
            out.append(q)
    return out


def fresh_queries(rng: np.random.Generator, taken: set[str]) -> Iterator[str]:
    """An endless stream of unique queries (saturation levels draw from it)."""
    while True:
        yield from unique_queries(rng, 64, taken)


@dataclass
class HttpSample:
    """One search through HTTP: client time, the replica's share (its Server-Timing), stages."""

    total_ms: float
    replica_ms: float
    stages_ms: dict[str, float]


def http_search(client: httpx.Client, query: str, mode: str = "hybrid") -> HttpSample:
    start = time.perf_counter()
    r = client.post("/v1/search", json={"query": query, "k": 10, "mode": mode})
    total = (time.perf_counter() - start) * 1000
    r.raise_for_status()
    return HttpSample(
        total, server_timing_ms(r.headers.get("server-timing", "")), r.json()["timings_ms"]
    )


def server_timing_ms(header: str, metric: str = "app") -> float:
    """The `dur` of one metric of a Server-Timing header (nan when absent)."""
    for entry in header.split(","):
        name, *params = (p.strip() for p in entry.split(";"))
        if name == metric:
            for param in params:
                if param.startswith("dur="):
                    return float(param[4:])
    return float("nan")


def stage_breakdown(samples: Sequence[HttpSample]) -> dict[str, float]:
    """p50 per stage of the HTTP searches: the engine's stages (`legs_wall`: the BM25 leg and
    embed + dense side by side), then what HTTP adds on top of them (`http_overhead`), split
    into the replica's own share (auth, validation, the hop to the search thread,
    serialisation) and the proxy and network's."""
    stages = sorted({k for s in samples for k in s.stages_ms})
    out = {
        f"{stage}_ms": round(percentile([s.stages_ms.get(stage, 0.0) for s in samples], 50), 3)
        for stage in stages
    }
    engine = [engine_ms(s.stages_ms) for s in samples]  # overlapped legs counted once
    out["engine_ms"] = round(percentile(engine, 50), 3)
    out["http_overhead_ms"] = round(
        percentile([s.total_ms - e for s, e in zip(samples, engine, strict=True)], 50), 3
    )
    timed = [(s, e) for s, e in zip(samples, engine, strict=True) if s.replica_ms == s.replica_ms]
    if timed:
        out["replica_framework_ms"] = round(percentile([s.replica_ms - e for s, e in timed], 50), 3)
        out["proxy_and_network_ms"] = round(
            percentile([s.total_ms - s.replica_ms for s, _ in timed], 50), 3
        )
    return out


def time_search_pair(
    side: LocalQuerySide, client: httpx.Client, warmup: list[str], queries: list[str]
) -> tuple[list[float], list[HttpSample]]:
    """Each query in-process and over HTTP, alternating which goes first; warm-up queries are
    their own set, never timed."""

    def inproc(q: str) -> float:
        start = time.perf_counter()
        side.search(TENANT, q, 10, "hybrid", None)
        return (time.perf_counter() - start) * 1000

    for q in warmup:
        inproc(q)
        http_search(client, q)
    inproc_ms: list[float] = []
    http: list[HttpSample] = []
    for n, q in enumerate(queries):
        if n % 2:
            http.append(http_search(client, q))
            inproc_ms.append(inproc(q))
        else:
            inproc_ms.append(inproc(q))
            http.append(http_search(client, q))
    return inproc_ms, http


def time_cache_hits(client: httpx.Client, queries: list[str], rounds: int) -> dict[str, float]:
    """The query-embedding cache's hit path, apart from every other figure: a small set of
    queries (none of them timed elsewhere) sent once to fill the cache, then `rounds` more
    times each, timed."""
    for q in queries:
        http_search(client, q)
    samples = [http_search(client, q) for _ in range(rounds) for q in queries]
    totals = [s.total_ms for s in samples]
    return {
        "queries": len(queries),
        "rounds": rounds,
        "http_p50_ms": round(statistics.median(totals), 2),
        "http_p99_ms": round(percentile(totals, 99), 2),
        "embed_p50_ms": round(statistics.median(s.stages_ms.get("embed", 0.0) for s in samples), 3),
    }


def measure_freshness(client: httpx.Client, probes: int) -> list[float]:
    """Seconds from sending an upsert to its chunk being found by both legs."""
    out = []
    for n in range(probes):
        marker = f"fresh{n}marker"
        doc = {"source": "fresh", "doc_id": f"f{n}", "title": "", "text": f"{marker} probe {n}"}
        start = time.perf_counter()
        client.post("/v1/documents", json={"documents": [doc]}).raise_for_status()
        while True:
            seen = [
                client.post("/v1/search", json={"query": marker, "k": 100, "mode": mode}).json()[
                    "hits"
                ]
                for mode in ("lexical", "dense")
            ]
            if all(any(h["doc_id"] == f"f{n}" for h in hits) for hits in seen):
                break
            if time.perf_counter() - start > 30:
                raise TimeoutError(f"probe {n} not searchable after 30 s")
        out.append(time.perf_counter() - start)
    return out


def measure_applied_everywhere(client: httpx.Client, probes: int) -> list[float]:
    """Seconds from sending an upsert to `?wait=true` answering applied (every view)."""
    out = []
    for n in range(probes):
        doc = {"source": "fresh", "doc_id": f"w{n}", "title": "", "text": f"wait probe {n}"}
        start = time.perf_counter()
        r = client.post(
            "/v1/documents",
            json={"documents": [doc]},
            params={"wait": "true", "wait_timeout_s": "30"},
        )
        r.raise_for_status()
        if r.json()["applied"] is not True:
            raise TimeoutError(f"probe {n} not applied everywhere after 30 s")
        out.append(time.perf_counter() - start)
    return out


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
    import psutil

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

    from ragindex.app.serve_cli import APP_NAME
    from ragindex.serve_config import INGEST

    handle = serve.get_deployment_handle(INGEST, app_name=APP_NAME)
    traces: list[dict[str, Any]] = handle.batch_traces.remote().result()
    return traces


def free_dashboard_port() -> None:
    """A free dashboard port unless RAGINDEX_DASHBOARD_PORT names one: other servers on the
    machine may hold 8265."""
    from ragindex.netutil import free_port

    os.environ.setdefault("RAGINDEX_DASHBOARD_PORT", str(free_port()))


def wait_port_released(port: int, timeout_s: float) -> None:
    """Until this loopback port can be bound again (as a server binds it: SO_REUSEADDR)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
                return
            except OSError as err:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"port {port} still taken {timeout_s:.0f} s after shutdown"
                    ) from err
        time.sleep(0.5)


def start_app(data_dir: Path, port: int, spec: RagIndexSpec, runtime: Runtime) -> None:
    """Run the app (Ray started on first use) with `spec`'s replicas: the Router's in the
    local runtime, each shard's in the cluster one. A change between one Router replica
    (direct ingress) and several (Serve's proxy) restarts Ray: the mode is fixed when Ray's
    processes start."""
    import ray
    from ray import serve

    from ragindex.app.serve import build_app
    from ragindex.app.serve_cli import APP_NAME, app_args, start_local, stop_local

    direct = os.environ.get("RAY_SERVE_ENABLE_DIRECT_INGRESS") == "1"
    if ray.is_initialized() and direct and runtime == "local" and spec.dense.replicas > 1:
        stop_local()
        wait_port_released(port, PORT_RELEASE_S)  # the old Router's server may still hold it
    if not ray.is_initialized():
        start_local(data_dir, port, spec, runtime=runtime)
        return
    spec_json = spec.model_dump(mode="json", by_alias=True)
    serve.run(
        build_app(app_args(data_dir, spec_json, runtime)),
        name=APP_NAME,
        route_prefix="/",
        blocking=False,
    )


def wait_every_replica_ready(client: httpx.Client, deadline_s: float) -> None:
    """Ready answers from every Router replica: READY_STREAK 200s in a row (requests spread
    over the replicas, so one still catching up answers 503 within a few)."""
    deadline = time.monotonic() + deadline_s
    streak = 0
    while streak < READY_STREAK:
        wait_ready(client, max(1.0, deadline - time.monotonic()))
        streak = 0
        while streak < READY_STREAK:
            try:
                if client.get("/readyz", timeout=READY_POLL_TIMEOUT_S).status_code != 200:
                    break
            except httpx.TransportError:
                break
            streak += 1


def search_body(query: str) -> dict[str, Any]:
    return {"query": query, "k": 10, "mode": "hybrid"}


def saturation(
    url: str,
    token: str,
    queries: Iterator[str],
    memory: PeakMemory,
) -> dict[str, Any]:
    def make_client() -> httpx.Client:
        return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    return ramp(make_client, queries, search_body, on_level=memory.sample)


def run_bench_serve(
    chunks: int,
    data_dir: Path | None,
    port: int,
    *,
    peer: bool = True,
    load: bool = True,
    log: LogKind = "file",
    shard_replicas: int | None = None,
) -> dict[str, Any]:
    """Load, then measure while the app runs, each pair interleaved in one run so both sides
    share the machine's load: HTTP / in-process hybrid search (and its stages), ragindex
    lexical / Elasticsearch BM25 through HTTP (`peer`), freshness, API / raw embedder ingest,
    then saturation with 1 and 2 Router replicas and the runtime's memory (`load`).

    `log="kafka"` puts the data plane on a local Kafka broker started for the run; with
    `shard_replicas` the app runs the cluster layout (Router, Shard<i> x replicas, Lexical,
    embedder pools, Ingest as their own deployments) on this machine, and the saturation ramp
    runs once, on that layout."""
    if chunks < MIN_CHUNKS:
        raise InvalidInput(f"--chunks must be at least {MIN_CHUNKS}")
    if shard_replicas is not None and shard_replicas < 1:
        raise InvalidInput(f"--shard-replicas must be at least 1, got {shard_replicas}")
    if data_dir is not None and data_dir.exists() and any(data_dir.iterdir()):
        raise InvalidInput(f"{data_dir} is not empty; the benchmark needs a fresh data dir")
    with ExitStack() as cleanup:
        if data_dir is None:  # a temporary one, removed afterwards (100 k chunks take ~1 GB)
            data_dir = Path(tempfile.mkdtemp(prefix="ragindex-bench-serve-"))
            cleanup.callback(shutil.rmtree, data_dir, True)
        if log == "kafka":
            cleanup.enter_context(kafka_data_plane())
        return _run(chunks, data_dir, port, peer=peer, load=load, shard_replicas=shard_replicas)


@contextmanager
def kafka_data_plane() -> Iterator[None]:
    """A local Kafka broker for the run; every process of it (this one, Ray's, which inherit
    the environment) finds it through the data plane's bootstrap variable."""
    from ragindex.log.kafka_server import start_kafka
    from ragindex.serve_config import KAFKA_BOOTSTRAP_ENV

    kafka = start_kafka(heap_mb=1024)
    os.environ[KAFKA_BOOTSTRAP_ENV] = kafka.bootstrap
    try:
        yield
    finally:
        os.environ.pop(KAFKA_BOOTSTRAP_ENV, None)
        kafka.stop()


def _run(
    chunks: int, data_dir: Path, port: int, *, peer: bool, load: bool, shard_replicas: int | None
) -> dict[str, Any]:
    from ragindex.app.serve_cli import (
        APP_NAME,
        CLUSTER_WORKER_NICENESS,
        ray_environment,
        stop_local,
    )

    # Ray fixes its auth mode when first imported: the serve environment goes first.
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.update(ray_environment(data_dir, "cluster" if shard_replicas else "local"))
    free_dashboard_port()
    from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, open_log
    from ragindex.app.serve.query_side import LocalQuerySide
    from ragindex.lexical.es_server import running_elasticsearch
    from ragindex.models.embedder import load_embedder
    from ragindex.topics import plane_topics

    runtime: Runtime = "local" if shard_replicas is None else "cluster"
    spec = RagIndexSpec.model_validate(BENCH_SPEC)
    if shard_replicas is not None:
        spec = spec.model_copy(
            update={"dense": spec.dense.model_copy(update={"replicas": shard_replicas})}
        )
    rng = np.random.default_rng(1)
    real = load_embedder(spec.embedder)
    phases: dict[str, float] = {}
    report: dict[str, Any] = {
        "chunks": chunks,
        "shards": spec.dense.shards,
        "log": "kafka" if os.environ.get(KAFKA_BOOTSTRAP_ENV) else "file",
        "runtime": runtime,
    }

    with timed_phase("load_s", phases):
        load_corpus(data_dir, spec, SyntheticPassages(real), chunks, rng)
    taken: set[str] = set()
    warmup = unique_queries(rng, WARMUP_QUERIES, taken)
    queries = unique_queries(rng, QUERIES, taken)
    peer_warmup = unique_queries(rng, WARMUP_QUERIES, taken)
    peer_queries = unique_queries(rng, QUERIES, taken)
    repeated = unique_queries(rng, CACHE_QUERIES, taken)
    texts = [ingest_texts(rng, n) for n in range(INGEST_ROUNDS + 1)]  # the last: warm-up

    token = create_token(data_dir, TENANT)
    with ExitStack() as stack:
        es = stack.enter_context(running_elasticsearch()) if peer else None
        if es is not None:
            topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
            log_ = open_log(data_dir)
            stack.callback(log_.close)
            with timed_phase("es_load_s", phases):
                es_index = fill_elasticsearch(
                    es.url, log_, topics.chunks, topics.shards, spec, data_dir / "es-offsets.json"
                )
            stack.callback(es_index.close)
        # what runs before Ray (Elasticsearch, Kafka) is not the runtime
        memory = PeakMemory(exclude=[p.pid for p in psutil.Process().children()])
        stack.callback(stop_local)
        with timed_phase("app_ready_s", phases):
            start_app(data_dir, port, spec, runtime)
            url = f"http://127.0.0.1:{port}"
            client = stack.enter_context(
                httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
            )
            wait_ready(client, ready_deadline_s(chunks))
        report["runtime_memory_at_rest"] = served_memory(memory.exclude)
        side = LocalQuerySide(
            spec, data_dir, APP_NAME, DEFAULT_NAMESPACE, data_dir / "replicas" / "bench"
        )
        try:
            side.load_models()
            with timed_phase("snapshot_published_s", phases):
                wait_snapshots_published(data_dir, spec, real.identity, ready_deadline_s(chunks))
            with timed_phase("bootstrap_s", phases):
                if not side.try_open():  # a new replica: published snapshots, then the tail
                    raise TimeoutError("the in-process replica found no topics")
            assert side.dense is not None
            report["bootstrap_snapshot_offsets"] = [r.start_offset for r in side.dense.replicas]
            inproc, http = time_search_pair(side, client, warmup, queries)
            report["query_cache_hits"] = time_cache_hits(client, repeated, CACHE_ROUNDS)
            if es is not None:
                es_client = stack.enter_context(httpx.Client(base_url=es.url, timeout=60))

                def lexical_floor(q: str) -> list[str]:
                    hits = side.search(TENANT, q, 10, "lexical", None).hits
                    return [h.chunk.chunk_id for h in hits]

                report["peer"] = time_lexical_peer(
                    client, es_client, TENANT, spec, peer_warmup, peer_queries, lexical_floor
                )
        finally:
            side.close()
        fresh = measure_freshness(client, FRESHNESS_PROBES)
        everywhere = measure_applied_everywhere(client, FRESHNESS_PROBES)
        idle_from = runtime_cpu_s(memory.exclude)
        time.sleep(IDLE_SAMPLE_S)  # what the runtime spends with nothing to do, for comparison
        idle_to = runtime_cpu_s(memory.exclude)
        report["idle_cpu_ms_per_s"] = cpu_per_doc(idle_from, idle_to, IDLE_SAMPLE_S)
        rounds = ingest_rounds(
            client,
            real,
            texts[:INGEST_ROUNDS],
            texts[INGEST_ROUNDS][:INGEST_WARMUP_DOCS],
            memory.exclude,
            CLUSTER_WORKER_NICENESS if runtime == "cluster" else None,
        )
        middle = median_round(rounds)
        report["ingest_rounds"] = [
            {k: v for k, v in r.items() if k not in ("cpu_ms_per_doc", "timeline")} for r in rounds
        ]
        report["ingest_cpu_ms_per_doc"] = middle["cpu_ms_per_doc"]
        report["ingest_timeline"] = middle["timeline"]
        if runtime == "cluster":
            report["ingest_raw_docs_per_s_at_replica_niceness"] = middle[
                "raw_docs_per_s_at_replica_niceness"
            ]
            report["ingest_ratio_at_replica_niceness"] = middle["ratio_at_replica_niceness"]
        if load:
            stream = fresh_queries(rng, taken)
            report["saturation"] = {"1": saturation(url, token, stream, memory)}
            report["runtime_memory_under_load"] = dict(memory.peak)
        if load and runtime == "local":
            two = spec.model_copy(update={"dense": spec.dense.model_copy(update={"replicas": 2})})
            with timed_phase("second_replica_ready_s", phases):
                start_app(data_dir, port, two, runtime)
                wait_every_replica_ready(client, ready_deadline_s(chunks))
            memory_two = PeakMemory(memory.exclude)
            report["saturation"]["2"] = saturation(url, token, stream, memory_two)
            report["runtime_memory_two_replicas_under_load"] = dict(memory_two.peak)

    http_ms = [s.total_ms for s in http]
    http_p50 = statistics.median(http_ms)
    inproc_p50 = statistics.median(inproc)
    report |= {
        "router_replicas": spec.dense.replicas if runtime == "local" else "autoscaled",
        "shard_replicas": spec.dense.replicas if runtime == "cluster" else "in each Router",
        "queries": len(queries),
        "warmup_queries": len(warmup),
        "http_p50_ms": round(http_p50, 2),
        "http_p99_ms": round(percentile(http_ms, 99), 2),
        "inproc_p50_ms": round(inproc_p50, 2),
        "inproc_p99_ms": round(percentile(inproc, 99), 2),
        "http_minus_inproc_p50_ms": round(http_p50 - inproc_p50, 2),
        "ratio_p50": round(http_p50 / inproc_p50, 3),
        "stages_p50": stage_breakdown(http),
        "freshness_p50_s": round(statistics.median(fresh), 3),
        "freshness_p99_s": round(percentile(fresh, 99), 3),
        "freshness_all_replicas_p99_s": round(percentile(everywhere, 99), 3),
        "bootstrap_s": phases["bootstrap_s"],
        "ingest_api_docs_per_s": middle["api_docs_per_s"],
        "ingest_raw_docs_per_s": middle["raw_docs_per_s"],
        "ingest_ratio": middle["ratio"],
        "phases_s": phases,
    }
    if "peer" in report:
        report["lexical_http_over_es_http_p50"] = report["peer"]["lexical_http_over_es_http_p50"]
    if "saturation" in report:
        for replicas, result in report["saturation"].items():
            report[f"saturation_qps_{replicas}_router"] = result["saturation_qps"]
    for state in ("at_rest", "under_load"):
        if f"runtime_memory_{state}" in report:
            report[f"runtime_rss_{state}_mb"] = report[f"runtime_memory_{state}"]["rss_mib"]
    goals = GOALS if runtime == "local" else CLUSTER_GOALS
    report["goals"] = {name: f"{op} {bound}" for name, (op, bound) in goals.items()}
    report["missed_goals"] = missed_goals(report, goals)
    return report


def format_report(report: dict[str, Any]) -> str:
    """Scalars one per line, nested sections as `section.key`, saturation levels as a table."""
    rows: list[str] = []

    def add(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                add(f"{prefix}.{key}" if prefix else key, inner)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            header = list(value[0])
            rows.append(f"{prefix:>44}  " + text_table(header, [list(v.values()) for v in value])
                        .replace("\n", "\n" + " " * 46))  # fmt: skip
        else:
            rows.append(f"{prefix:>44}  {value}")

    add("", {k: v for k, v in report.items() if k not in ("goals", "missed_goals")})
    goals = ", ".join(f"{k} {v}" for k, v in report["goals"].items())
    missed = "; ".join(report["missed_goals"]) or "none"
    return "\n".join([*rows, f"{'goals':>44}  {goals}", f"{'missed goals':>44}  {missed}"])
