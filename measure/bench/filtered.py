"""`ragindex bench filtered`: recall@10 and latency of tenant-filtered dense search by tenant size.

Why: a filter inside one shared HNSW graph fails small tenants (FIELD-NOTES: recall@10 0.13
for a 1 % tenant), which is why shards partition by tenant. This measures the served dense
view (evals.served_vectors: chunk records in a log, one shard replica per partition with its
per-tenant partitions, fan-out and merge) against brute-force numpy search over the tenant's
own vectors, for tenants holding given shares of the collection.

The vectors are synthetic but clustered like text embeddings: topics, subtopics inside
them, and per-vector noise; each tenant writes about a few topics, and queries are drawn
near the tenant's topics without duplicating a stored vector.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragindex.config import DenseSpec
from ragindex.errors import InvalidInput
from ragindex.filters import (
    Filter,
    TermExpr,
    compile_access,
    dense_plan,
    parse_filter,
)
from ragindex.measure.bench.served_vectors import ServedVectors, vector_chunk
from ragindex.measure.stats import WARMUP_QUERIES, percentiles, split_warmup
from ragindex.shards import ReplicaDenseIndex
from ragindex.types import Chunk, ModelIdentity

DEFAULT_SHARES = (0.001, 0.01, 0.1, 0.5)
_BATCH = 5_000
_SUBTOPICS = 8


class TopicModel:
    """Clustered unit vectors: point = topic + subtopic offset + noise, normalised."""

    def __init__(self, dim: int, topics: int, rng: np.random.Generator) -> None:
        self.dim = dim
        self.rng = rng
        self.topics = _normalise(rng.standard_normal((topics, dim)))
        self.subtopics = rng.standard_normal((topics, _SUBTOPICS, dim)) * (0.7 / np.sqrt(dim))

    def sample(self, n: int, topic_ids: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """n vectors from the given topics with the given mixture weights."""
        topic = self.rng.choice(topic_ids, size=n, p=weights)
        sub = self.rng.integers(0, _SUBTOPICS, size=n)
        noise = self.rng.standard_normal((n, self.dim)) * (1.0 / np.sqrt(self.dim))
        return _normalise(self.topics[topic] + self.subtopics[topic, sub] + noise)


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def tenant_sizes(vectors: int, shares: Sequence[float]) -> dict[str, int]:
    """Vectors per measured tenant, keyed by the share as written in the result ("0.01")."""
    if vectors < 1:
        raise InvalidInput(f"vectors must be >= 1; got {vectors}")
    if not shares or any(not 0 < s <= 1 for s in shares) or sum(shares) > 1 + 1e-9:
        raise InvalidInput(f"shares must be in (0, 1] and sum to at most 1; got {list(shares)}")
    sizes = {repr(float(s)): max(1, round(s * vectors)) for s in shares}
    if len(sizes) != len(shares):
        raise InvalidInput(f"shares must be distinct; got {list(shares)}")
    return sizes


def recall_at_k(found: Sequence[str], truth: Sequence[str]) -> float:
    """Share of the true top-k that the search returned."""
    return len(set(found) & set(truth)) / len(truth) if truth else 1.0


def run_filtered_bench(
    vectors: int = 100_000,
    dim: int = 384,
    shares: Sequence[float] = DEFAULT_SHARES,
    queries: int = 200,
    seed: int = 0,
    dense: DenseSpec | None = None,
    top_k: int = 10,
    warmup: int = WARMUP_QUERIES,
) -> dict[str, dict[str, Any]]:
    """Build a sharded index of `vectors` clustered vectors over tenants and measure each share.

    Tenants `share-0_01` (etc.) hold round(s * vectors) vectors; filler tenants hold the rest,
    so the index holds `vectors` in all. Uses the default DenseSpec (shards, HNSW, exact threshold)
    unless `dense` is given. Each share gets `warmup` untimed queries, then `queries` timed
    ones. Returns {share: {recall@10, p50_ms, p99_ms, vectors, search}}.
    """
    sizes = tenant_sizes(vectors, shares)
    if queries < 1:
        raise InvalidInput(f"queries must be >= 1; got {queries}")
    dense = dense or DenseSpec()
    rng = np.random.default_rng(seed)
    model = TopicModel(dim, topics=max(32, vectors // 400), rng=rng)
    identity = ModelIdentity("bench-topic-model", f"seed-{seed}", dim, normalized=True)

    def topics_for_tenant(n: int) -> tuple[np.ndarray, np.ndarray]:
        count = int(np.clip(n // 500, 3, len(model.topics)))
        ids = rng.choice(len(model.topics), size=count, replace=False)
        return ids, rng.dirichlet(np.ones(count))

    filler = vectors - sum(sizes.values())
    tenants = {_tenant(key): n for key, n in sizes.items()}
    tenants |= {f"filler-{i}": n for i, n in enumerate(_split(filler, max(1, vectors // 10)))}
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="ragindex-bench-") as tmp:
        served = ServedVectors(Path(tmp), identity, dense)
        try:
            mixtures, stored = {}, {}
            for tenant, n in tenants.items():
                mixtures[tenant] = topics_for_tenant(n)
                ids, batches = [], []
                for start in range(0, n, _BATCH):
                    batch = model.sample(min(_BATCH, n - start), *mixtures[tenant])
                    batch_ids = [f"{tenant}:doc{start + i}:0" for i in range(len(batch))]
                    served.write([vector_chunk(tenant, cid) for cid in batch_ids], batch)
                    ids += batch_ids
                    batches.append(batch)
                if tenant.startswith("share-"):
                    stored[tenant] = (ids, np.concatenate(batches))
            index = served.replicas()
            for key in sizes:
                tenant = _tenant(key)
                results[key] = _measure(
                    index,
                    tenant,
                    stored[tenant],
                    model.sample(warmup + queries, *mixtures[tenant]),
                    top_k,
                    warmup,
                )
        finally:
            served.close()
    return results


def _tenant(share_key: str) -> str:
    return "share-" + share_key.replace(".", "_")


def _split(total: int, part: int) -> list[int]:
    return [min(part, total - start) for start in range(0, total, part)]


def _measure(
    index: ReplicaDenseIndex,
    tenant: str,
    truth: tuple[list[str], np.ndarray],
    qs: np.ndarray,
    top_k: int,
    warmup: int,
) -> dict[str, Any]:
    """Recall against brute force over the tenant's own vectors, and single-query latency,
    over the queries after the first `warmup` (run untimed)."""
    ids, stored = truth
    warm, timed = split_warmup(qs, warmup)
    for q in warm:
        index.search(q, top_k, tenant, index.identity)
    recalls, latencies = [], []
    for q in timed:
        t0 = time.perf_counter()
        hits = index.search(q, top_k, tenant, index.identity)
        latencies.append((time.perf_counter() - t0) * 1000)
        scores = stored @ q
        k = min(top_k, len(ids))
        top = np.argpartition(-scores, k - 1)[:k]
        recalls.append(recall_at_k([h.chunk_id for h in hits], [ids[i] for i in top]))
    return {
        "recall@10": round(float(np.mean(recalls)), 4),
        **percentiles(latencies, digits=3),
        "vectors": len(ids),
        "search": "+".join(sorted(set(index.kinds(tenant)))),
    }


ACCESS_SHARES = (0.001, 0.01, 0.1, 0.5, 1.0)
AccessKind = Literal["acl", "metadata"]


def run_access_bench(
    vectors: int = 100_000,
    dim: int = 384,
    shares: Sequence[float] = ACCESS_SHARES,
    queries: int = 200,
    seed: int = 0,
    dense: DenseSpec | None = None,
    kind: AccessKind = "acl",
    top_k: int = 10,
    warmup: int = WARMUP_QUERIES,
) -> dict[str, dict[str, Any]]:
    """Recall@10 against exact search over the allowed vectors, and latency, for ACLs (or a
    metadata range) that allow given shares of ONE tenant's `vectors` vectors.

    Every chunk carries an ACL (`kind="acl"`: `group:all` and `group:p<share>` for each share
    its rank falls under) or a metadata value `u` (`kind="metadata"`: filter `u < share`), so
    each share allows exactly round(share * vectors) chunks. The search is the served one: the
    filter compiled to terms, the allowed ids selected from the postings the shard replicas
    keep of the chunks they applied, and each partition choosing exact or HNSW-with-selector
    (dense_plan).
    Each filter gets `warmup` untimed queries (the first one's latency, with the selection not
    yet cached, is `first_ms`), then `queries` timed ones. Returns {"unfiltered": row, share:
    row}; rows hold recall@10, p50_ms, p99_ms, first_ms, allowed and the plan chosen."""
    if warmup < 1:
        raise InvalidInput(f"the access benchmark needs a warm-up of >= 1 query; got {warmup}")
    if vectors < 1 or queries < 1:
        raise InvalidInput(f"vectors and queries must be >= 1; got {vectors}, {queries}")
    if not shares or any(not 0 < s <= 1 for s in shares):
        raise InvalidInput(f"shares must be in (0, 1]; got {list(shares)}")
    dense = dense or DenseSpec()
    rng = np.random.default_rng(seed)
    model = TopicModel(dim, topics=max(32, vectors // 400), rng=rng)
    identity = ModelIdentity("bench-topic-model", f"seed-{seed}", dim, normalized=True)
    count = int(np.clip(vectors // 500, 3, len(model.topics)))
    mixture = (
        rng.choice(len(model.topics), size=count, replace=False),
        rng.dirichlet(np.ones(count)),
    )
    rank = rng.permutation(vectors)  # chunk i is allowed by share s iff rank[i] < s * vectors
    ids = [f"src:doc{i}:0" for i in range(vectors)]
    chunks = [_bench_chunk(cid, int(rank[i]), vectors, shares, kind) for i, cid in enumerate(ids)]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="ragindex-bench-") as tmp:
        served = ServedVectors(Path(tmp), identity, dense)
        try:
            stored = []
            for start in range(0, vectors, _BATCH):
                batch = model.sample(min(_BATCH, vectors - start), *mixture)
                served.write(chunks[start : start + len(batch)], batch)
                stored.append(batch)
            matrix = np.concatenate(stored)
            qs = model.sample(warmup + queries, *mixture)
            index = served.replicas()
            results["unfiltered"] = _measure_access(
                index, None, np.arange(vectors), ids, matrix, qs, top_k, warmup
            )
            results["unfiltered"]["plan"] = "+".join(sorted(set(index.kinds(ACCESS_TENANT))))
            for share in shares:
                allowed = np.flatnonzero(rank < round(share * vectors))
                expr = compile_access(*_bench_access(share, kind))
                row = _measure_access(index, expr, allowed, ids, matrix, qs, top_k, warmup)
                per_shard = max(1, len(allowed) // dense.shards)
                plan = dense_plan(
                    per_shard, vectors // dense.shards, top_k, dense.hnsw.ef_search,
                    dense.exact_threshold,
                )  # fmt: skip
                row["plan"] = "exact" if plan.exact else f"hnsw ef={plan.ef_search}"
                if len(allowed) == vectors:  # the partition searches it as no filter
                    row["plan"] = "unfiltered"
                results[repr(float(share))] = row
        finally:
            served.close()
    return results


ACCESS_TENANT = "acme"


def _share_group(share: float) -> str:
    return "group:p" + repr(float(share)).replace(".", "_")


def _bench_chunk(
    chunk_id: str, rank: int, vectors: int, shares: Sequence[float], kind: AccessKind
) -> Chunk:
    acl, metadata = None, {}
    if kind == "acl":
        acl = ("group:all", *(_share_group(s) for s in shares if rank < round(s * vectors)))
    else:
        metadata = {"u": rank / vectors}
    return vector_chunk(ACCESS_TENANT, chunk_id, metadata, acl)


def _bench_access(share: float, kind: AccessKind) -> tuple[Filter | None, set[str] | None]:
    if kind == "acl":
        return None, {_share_group(share)}
    return parse_filter({"field": "metadata.u", "lt": share}), None


def _measure_access(
    index: ReplicaDenseIndex,
    expr: TermExpr | None,
    allowed: np.ndarray,
    ids: list[str],
    matrix: np.ndarray,
    qs: np.ndarray,
    top_k: int,
    warmup: int,
) -> dict[str, Any]:
    warm, timed = split_warmup(qs, warmup)
    start = time.perf_counter()
    index.search(warm[0], top_k, ACCESS_TENANT, index.identity, expr)
    first_ms = (time.perf_counter() - start) * 1000  # this filter's first query: not cached
    for q in warm[1:]:
        index.search(q, top_k, ACCESS_TENANT, index.identity, expr)
    recalls, latencies = [], []
    candidates = matrix[allowed]
    for q in timed:
        t0 = time.perf_counter()
        hits = index.search(q, top_k, ACCESS_TENANT, index.identity, expr)
        latencies.append((time.perf_counter() - t0) * 1000)
        k = min(top_k, len(allowed))
        top = np.argpartition(-(candidates @ q), k - 1)[:k]
        recalls.append(recall_at_k([h.chunk_id for h in hits], [ids[allowed[i]] for i in top]))
    return {
        "recall@10": round(float(np.mean(recalls)), 4),
        **percentiles(latencies, digits=3),
        "first_ms": round(first_ms, 3),
        "allowed": len(allowed),
    }
