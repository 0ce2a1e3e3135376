"""`ragindex bench serve`: what the Serve layer costs over the in-process engine.

One run, one corpus (synthetic text, synthetic clustered vectors, 2 shards), measured three ways:
- hybrid search p50/p99 through HTTP vs the same queries through the in-process engine (the
  Router's own query path, opened read-only in this process), interleaved query by query while
  the app serves, so both see the same background load on a noisy machine;
- upsert-to-searchable through HTTP (both legs), the freshness bound's measurement, and
  ack-to-applied everywhere (`?wait=true`: every shard replica of the answering Router and its
  BM25 view), `freshness_all_replicas_p99_s`;
- `bootstrap_s`: a new replica (a fresh node-local directory, no snapshot) from the log to
  serving, i.e. replaying every chunk into FAISS + text + BM25;
- ingest throughput through the API vs the raw embedder on the same passages.
The corpus goes into the log's `docs` topic and through the real IngestWorker with passage
vectors drawn synthetically (embedding 100 k passages would take hours on 2 cores); queries
use the real model.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.measure import Goals, missed_goals, percentile
from ragindex.protocols import Embedder, Vectors
from ragindex.records import doc_key, encode_document
from ragindex.router.auth import create_token
from ragindex.topics import partition_for_key
from ragindex.types import Document

if TYPE_CHECKING:  # Ray is imported only when the benchmark runs
    from ragindex.app.serve.query_side import LocalQuerySide

TENANT = "bench"
# What the serving path promises (`--check` exits 1 when a run misses one).
GOALS: Goals = {
    "ratio_p50": ("<=", 1.5),
    "freshness_p99_s": ("<=", 2.0),
    "ingest_ratio": (">=", 0.9),
    "freshness_all_replicas_p99_s": ("<=", 2.0),
    "bootstrap_s": ("<=", 20.0),
}
LOAD_BATCH = 2_000
QUERIES = 100
FRESHNESS_PROBES = 20
INGEST_DOCS = 96
INGEST_BATCH = 32  # what a client like `ragindex demo` sends

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
    from ragindex.app.serve.data_plane import (
        DEFAULT_NAMESPACE,
        ensure_topics,
        open_log,
        plane_topics,
    )
    from ragindex.app.serve_cli import APP_NAME
    from ragindex.ingest.worker import IngestWorker

    topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
    log = open_log(data_dir)
    try:
        ensure_topics(log, topics)
        worker = IngestWorker(log, topics, embedder, spec.chunking, range(topics.docs_partitions))
        for start in range(0, chunks, LOAD_BATCH):
            records = []
            for n in range(start, min(chunks, start + LOAD_BATCH)):
                doc = Document("synth", f"d{n}", f"Synthetic {n}", synthetic_text(rng, n))
                key = doc_key(TENANT, doc.source, doc.doc_id)
                records.append(
                    (partition_for_key(key, topics.docs_partitions), key, encode_document(doc))
                )
            log.append(topics.docs, records)
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


def bench_queries(rng: np.random.Generator) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=5)) for _ in range(QUERIES)]


def time_search_pair(
    side: LocalQuerySide, client: httpx.Client, queries: list[str]
) -> tuple[list[float], list[float]]:
    """Each query in-process and over HTTP, alternating which goes first; ms, after warm-up."""

    def inproc(q: str) -> float:
        start = time.perf_counter()
        side.search(TENANT, q, 10, "hybrid", None)
        return (time.perf_counter() - start) * 1000

    def http(q: str) -> float:
        start = time.perf_counter()
        client.post("/v1/search", json={"query": q, "k": 10}).raise_for_status()
        return (time.perf_counter() - start) * 1000

    for q in queries[:10]:
        inproc(q)
        http(q)
    inproc_ms: list[float] = []
    http_ms: list[float] = []
    for n, q in enumerate(queries):
        if n % 2:
            http_ms.append(http(q))
            inproc_ms.append(inproc(q))
        else:
            inproc_ms.append(inproc(q))
            http_ms.append(http(q))
    return inproc_ms, http_ms


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


def ingest_texts(rng: np.random.Generator) -> list[str]:
    return [synthetic_text(rng, 10_000_000 + i, words=150) for i in range(INGEST_DOCS)]


def raw_embed_rate(embedder: Embedder, texts: list[str]) -> float:
    embedder.embed_passages(texts[:8])
    start = time.perf_counter()
    embedder.embed_passages(texts)
    return len(texts) / (time.perf_counter() - start)


def api_ingest_rate(client: httpx.Client, texts: list[str]) -> float:
    docs = [
        {"source": "ingest", "doc_id": f"i{i}", "title": "", "text": t} for i, t in enumerate(texts)
    ]
    start = time.perf_counter()
    for b in range(0, len(docs), INGEST_BATCH):
        r = client.post("/v1/documents", json={"documents": docs[b : b + INGEST_BATCH]})
        r.raise_for_status()
    return len(docs) / (time.perf_counter() - start)


def run_bench_serve(chunks: int, data_dir: Path | None, port: int) -> dict[str, Any]:
    """Load, start Serve, then measure each pair (HTTP / in-process search, API / raw embedder
    ingest) while the app runs, so both sides of a ratio share the machine's load."""
    from ragindex.app.serve_cli import APP_NAME, ray_environment, start_local, stop_local

    if chunks < QUERIES:
        raise InvalidInput(f"--chunks must be at least {QUERIES}")
    if data_dir is None:
        data_dir = Path(tempfile.mkdtemp(prefix="ragindex-bench-serve-"))
    elif data_dir.exists() and any(data_dir.iterdir()):
        raise InvalidInput(f"{data_dir} is not empty; the benchmark needs a fresh data dir")
    # Ray fixes its auth mode when first imported: the serve environment goes first.
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.update(ray_environment(data_dir))
    from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE
    from ragindex.app.serve.query_side import LocalQuerySide
    from ragindex.models.embedder import load_embedder

    spec = RagIndexSpec.model_validate({"dense": {"shards": 2, "replicas": 1}})
    rng = np.random.default_rng(1)
    real = load_embedder(spec.embedder)

    t0 = time.perf_counter()
    load_corpus(data_dir, spec, SyntheticPassages(real), chunks, rng)
    load_s = time.perf_counter() - t0
    queries = bench_queries(rng)
    texts = ingest_texts(rng)

    token = create_token(data_dir, TENANT)
    start_local(data_dir, port, spec)
    try:
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as client:
            wait_ready(client, ready_deadline_s(chunks))
            side = LocalQuerySide(
                spec, data_dir, APP_NAME, DEFAULT_NAMESPACE, data_dir / "replicas" / "bench"
            )
            try:
                side.load_models()
                t1 = time.perf_counter()
                if not side.try_open():  # a new replica: replays the whole chunks topic
                    raise TimeoutError("the in-process replica found no topics")
                bootstrap_s = time.perf_counter() - t1
                inproc, http = time_search_pair(side, client, queries)
            finally:
                side.close()
            fresh = measure_freshness(client, FRESHNESS_PROBES)
            everywhere = measure_applied_everywhere(client, FRESHNESS_PROBES)
            api_rate = api_ingest_rate(client, texts)
            raw_rate = raw_embed_rate(real, texts)
    finally:
        stop_local()

    http_p50 = statistics.median(http)
    inproc_p50 = statistics.median(inproc)
    report: dict[str, Any] = {
        "chunks": chunks,
        "shards": spec.dense.shards,
        "router_replicas": spec.dense.replicas,
        "queries": len(queries),
        "load_s": round(load_s, 1),
        "http_p50_ms": round(http_p50, 2),
        "http_p99_ms": round(percentile(http, 99), 2),
        "inproc_p50_ms": round(inproc_p50, 2),
        "inproc_p99_ms": round(percentile(inproc, 99), 2),
        "ratio_p50": round(http_p50 / inproc_p50, 3),
        "freshness_p50_s": round(statistics.median(fresh), 3),
        "freshness_p99_s": round(percentile(fresh, 99), 3),
        "freshness_all_replicas_p99_s": round(percentile(everywhere, 99), 3),
        "bootstrap_s": round(bootstrap_s, 2),
        "log": "file",
        "ingest_api_docs_per_s": round(api_rate, 2),
        "ingest_raw_docs_per_s": round(raw_rate, 2),
        "ingest_ratio": round(api_rate / raw_rate, 3),
    }
    report["goals"] = {name: f"{op} {bound}" for name, (op, bound) in GOALS.items()}
    report["missed_goals"] = missed_goals(report, GOALS)
    return report


def format_report(report: dict[str, Any]) -> str:
    rows = [f"{k:>24}  {v}" for k, v in report.items() if k not in ("goals", "missed_goals")]
    goals = ", ".join(f"{k} {v}" for k, v in report["goals"].items())
    missed = "; ".join(report["missed_goals"]) or "none"
    return "\n".join([*rows, f"{'goals':>24}  {goals}", f"{'missed goals':>24}  {missed}"])
