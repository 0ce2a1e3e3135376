"""The Router's query path: in-process over co-located replicas (local), or over handles (cluster).

- local: the Router replica holds the whole query path in-process (query embedder, one
  ShardReplica per dense shard tailing that shard's WAL, a tantivy reader, chunk-store reads)
  and catches up every REFRESH_S, far inside the freshness bound.
- cluster: the Router fans out through handles to Shard<i>, Lexical, QueryEmbedder (batched)
  and Reranker deployments.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray.serve.handle import DeploymentHandle

from ragindex.app.answers import answer_service
from ragindex.app.engine import STAMP, open_lexical
from ragindex.app.serve.pools import RemoteEmbedder, RemoteReranker
from ragindex.app.serve.threads import limit_threads
from ragindex.config import RagIndexSpec
from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.ingest.store import ChunkStore
from ragindex.models.embedder import load_embedder
from ragindex.models.reranker import load_reranker
from ragindex.protocols import Embedder, LexicalIndex, Vectors
from ragindex.router.answer import Answer, AnswerService
from ragindex.router.query import QueryEngine, SearchResult
from ragindex.shards import ShardReplica
from ragindex.shards.sharded import shard_dir
from ragindex.types import ModelIdentity, ScoredId


def merge_by_score(results: Sequence[Sequence[ScoredId]], k: int) -> list[ScoredId]:
    """Top-k of several shards' hits by score (ties by chunk id), as ShardedDenseIndex does."""
    hits = [h for shard_hits in results for h in shard_hits]
    return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[:k]


class _ReadOnlyDense:
    """The write half of the DenseIndex protocol for the query side, which never writes."""

    def upsert(self, tenant_id: str, chunk_ids: Sequence[str], vectors: Vectors) -> None:
        raise InvalidInput("the query side's dense index is read-only; send writes to Ingest")

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        raise InvalidInput("the query side's dense index is read-only; send writes to Ingest")


class ReplicaDenseIndex(_ReadOnlyDense):
    """The dense leg over read replicas of every shard (DenseIndex protocol, read-only)."""

    def __init__(self, replicas: list[ShardReplica]) -> None:
        self.replicas = replicas
        self.identity = replicas[0].identity

    def search(
        self, query_vector: Vectors, top_k: int, tenant_id: str, identity: ModelIdentity
    ) -> list[ScoredId]:
        return merge_by_score(
            [r.search(query_vector, top_k, tenant_id, identity) for r in self.replicas], top_k
        )

    def catch_up(self) -> int:
        return sum(r.catch_up() for r in self.replicas)

    def count(self, tenant_id: str) -> int:
        return sum(r.shard.count(tenant_id) for r in self.replicas)

    def offsets(self) -> list[int]:
        return [r.offset for r in self.replicas]


def reload_lexical(index: LexicalIndex) -> None:
    """See the writer's latest commits: tantivy readers reload; Elasticsearch refreshes itself."""
    reload = getattr(index, "reload", None)
    if reload is not None:
        reload()


def stamped_identity(data_dir: Path) -> ModelIdentity | None:
    """The embedder identity the writer stamped on the data dir, or None before it has."""
    path = data_dir / STAMP
    if not path.exists():
        return None
    return ModelIdentity.from_dict(json.loads(path.read_text())["identity"])


def index_exists(data_dir: Path, num_shards: int) -> bool:
    """Whether the writer has created every shard's snapshot (readers open after it)."""
    dense = data_dir / "dense"
    return all(
        (shard_dir(dense, i) / "snapshot" / "manifest.json").exists() for i in range(num_shards)
    )


class LocalQuerySide:
    """Everything a local Router replica reads, owned by its worker thread."""

    def __init__(self, spec: RagIndexSpec, data_dir: Path) -> None:
        self.spec = spec
        self.data_dir = data_dir
        self.engine: QueryEngine | None = None
        self.dense: ReplicaDenseIndex | None = None
        self.lexical: LexicalIndex | None = None
        self.store: ChunkStore | None = None
        self.embedder: Embedder | None = None
        self.answers: AnswerService | None = None
        self.refreshed_at = 0.0

    def load_models(self) -> None:
        limit_threads()
        self.embedder = load_embedder(self.spec.embedder)

    def try_open(self) -> bool:
        """Open the readers once the writer has created the index; False until then."""
        if self.engine is not None:
            return True
        if self.embedder is None or not index_exists(self.data_dir, self.spec.dense.shards):
            return False
        dense_root = self.data_dir / "dense"
        replicas = [
            ShardReplica(
                shard_dir(dense_root, i), self.spec.dense.hnsw, self.spec.dense.exact_threshold
            )
            for i in range(self.spec.dense.shards)
        ]
        self.dense = ReplicaDenseIndex(replicas)
        self.lexical = open_lexical(
            self.spec, self.data_dir, self.embedder.identity, read_only=True
        )
        self.store = ChunkStore(self.data_dir / "store.sqlite")
        reranker = load_reranker(self.spec.reranker) if self.spec.reranker.enabled else None
        self.engine = QueryEngine(
            self.embedder,
            self.dense,
            self.lexical,
            self.store,
            fusion=self.spec.fusion,
            lexical_spec=self.spec.lexical,
            reranker=reranker,
            reranker_spec=self.spec.reranker,
        )
        self.refreshed_at = time.monotonic()
        return True

    def refresh(self) -> None:
        """Apply what the writer logged and committed since the last call."""
        if not self.try_open():
            return
        assert self.dense is not None and self.lexical is not None
        self.dense.catch_up()
        reload_lexical(self.lexical)
        self.refreshed_at = time.monotonic()

    def search(
        self, tenant_id: str, query: str, k: int | None, mode: str, rerank: bool | None
    ) -> SearchResult:
        if self.engine is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        return self.engine.search(tenant_id, query, k, mode, rerank)

    def answer(self, tenant_id: str, question: str, k: int) -> Answer:
        if self.engine is None or self.embedder is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        if self.answers is None:
            self.answers = answer_service(self.spec, self.engine, self.embedder)
        return self.answers.answer(tenant_id, question, k)

    def stats(self, tenant_id: str) -> dict[str, Any]:
        if self.dense is None or self.store is None or self.lexical is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        return {
            "tenant": tenant_id,
            "chunks": self.store.count(tenant_id),
            "documents": len(self.store.documents(tenant_id)),
            "dense_vectors": self.dense.count(tenant_id),
            "lexical_docs": self.lexical.count(tenant_id),
            "shards": self.spec.dense.shards,
            "wal_offsets": self.dense.offsets(),
            "staleness_s": round(time.monotonic() - self.refreshed_at, 3),
            "freshness_bound_s": self.spec.freshness_s,
        }

    def close(self) -> None:
        if self.lexical is not None:
            self.lexical.close()
        if self.store is not None:
            self.store.close()


class RemoteDenseIndex(_ReadOnlyDense):
    """Fan out to every Shard<i> deployment at once, then merge by score."""

    def __init__(self, shards: list[DeploymentHandle], identity: ModelIdentity) -> None:
        self.shards = shards
        self.identity = identity

    def search(
        self, query_vector: Vectors, top_k: int, tenant_id: str, identity: ModelIdentity
    ) -> list[ScoredId]:
        pending = [s.search.remote(query_vector, top_k, tenant_id, identity) for s in self.shards]
        return merge_by_score([p.result() for p in pending], top_k)

    def count(self, tenant_id: str) -> int:
        pending = [s.count.remote(tenant_id) for s in self.shards]
        return sum(int(p.result()) for p in pending)


class RemoteLexical:
    def __init__(self, handle: DeploymentHandle) -> None:
        self.handle = handle

    def upsert(self, chunks: Sequence[Any]) -> None:
        raise InvalidInput("the Lexical deployment is a reader; send writes to Ingest")

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        raise InvalidInput("the Lexical deployment is a reader; send writes to Ingest")

    def search(self, query: str, top_k: int, tenant_id: str) -> list[ScoredId]:
        return self.handle.search.remote(query, top_k, tenant_id).result()

    def count(self, tenant_id: str) -> int:
        return int(self.handle.count.remote(tenant_id).result())

    def close(self) -> None:
        return None


class ClusterQuerySide:
    """A cluster Router's query path: the same QueryEngine over remote legs."""

    def __init__(
        self,
        spec: RagIndexSpec,
        data_dir: Path,
        embedder: RemoteEmbedder,
        shards: list[DeploymentHandle],
        lexical: DeploymentHandle,
        reranker: DeploymentHandle | None,
    ) -> None:
        self.spec = spec
        self.dense = RemoteDenseIndex(shards, embedder.identity)
        self.lexical = RemoteLexical(lexical)
        self.store = ChunkStore(data_dir / "store.sqlite")
        self.answers: AnswerService | None = None
        self.embedder = embedder
        self.engine = QueryEngine(
            embedder,
            self.dense,
            self.lexical,
            self.store,
            fusion=spec.fusion,
            lexical_spec=spec.lexical,
            reranker=RemoteReranker(reranker) if reranker is not None else None,
            reranker_spec=spec.reranker,
        )

    def load_models(self) -> None:
        limit_threads()

    def try_open(self) -> bool:
        return True

    def refresh(self) -> None:
        return None  # shard and lexical deployments catch up on their own

    def search(
        self, tenant_id: str, query: str, k: int | None, mode: str, rerank: bool | None
    ) -> SearchResult:
        return self.engine.search(tenant_id, query, k, mode, rerank)

    def answer(self, tenant_id: str, question: str, k: int) -> Answer:
        if self.answers is None:
            self.answers = answer_service(self.spec, self.engine, self.embedder)
        return self.answers.answer(tenant_id, question, k)

    def stats(self, tenant_id: str) -> dict[str, Any]:
        return {
            "tenant": tenant_id,
            "chunks": self.store.count(tenant_id),
            "documents": len(self.store.documents(tenant_id)),
            "dense_vectors": self.dense.count(tenant_id),
            "lexical_docs": self.lexical.count(tenant_id),
            "shards": self.spec.dense.shards,
            "freshness_bound_s": self.spec.freshness_s,
        }

    def close(self) -> None:
        self.store.close()


QuerySide = LocalQuerySide | ClusterQuerySide
