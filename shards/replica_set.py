"""Every shard of an index as one dense index: this process's replica of each shard
(`LogShardReplica`), searched by fanning out and merging by score. The local Router's dense leg
and chunk lookup; the dense benchmarks search the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from concurrent.futures import wait as wait_for

import numpy as np

from ragindex.errors import InvalidInput
from ragindex.filters import TermExpr
from ragindex.hashing import shard_for
from ragindex.protocols import Vectors
from ragindex.shards.log_replica import LogShardReplica
from ragindex.types import Chunk, ModelIdentity, ScoredId


def merge_by_score(results: Sequence[Sequence[ScoredId]], k: int) -> list[ScoredId]:
    """Top-k of several shards' hits by score (ties by chunk id)."""
    hits = [h for shard_hits in results for h in shard_hits]
    return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[:k]


def by_shard(tenant_id: str, chunk_ids: Sequence[str], shards: int) -> dict[int, list[str]]:
    """Chunk ids grouped by the shard that holds them (and their text)."""
    groups: dict[int, list[str]] = {}
    for cid in chunk_ids:
        groups.setdefault(shard_for(tenant_id, cid, shards), []).append(cid)
    return groups


class ReadOnlyDense:
    """The write half of the DenseIndex protocol for the query side, which never writes."""

    def upsert(self, tenant_id: str, chunk_ids: Sequence[str], vectors: Vectors) -> None:
        raise InvalidInput("the query side's dense index is read-only; send writes to Ingest")

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        raise InvalidInput("the query side's dense index is read-only; send writes to Ingest")


class ReplicaDenseIndex(ReadOnlyDense):
    """The dense leg and chunk lookup over this process's replicas of every shard."""

    def __init__(
        self,
        replicas: list[LogShardReplica],
        identity: ModelIdentity,
        shard_executor: Executor | None = None,
    ) -> None:
        """`shard_executor`: where every shard but the first is searched while the calling
        thread searches the first (FAISS releases the GIL); None searches them in turn."""
        self.replicas = replicas
        self.identity = identity
        self.shard_executor = shard_executor

    def search(
        self,
        query_vector: Vectors,
        top_k: int,
        tenant_id: str,
        identity: ModelIdentity,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        first, *others = self.replicas

        def search(replica: LogShardReplica) -> list[ScoredId]:
            return replica.search(
                query_vector, top_k, tenant_id, identity, access, with_chunks=with_chunks
            )

        if self.shard_executor is None or not others:
            return merge_by_score([search(r) for r in self.replicas], top_k)
        jobs = [self.shard_executor.submit(search, r) for r in others]
        try:
            results = [search(first)]
        finally:
            wait_for(jobs)  # no shard search outlives the one that asked it
        return merge_by_score(results + [j.result() for j in jobs], top_k)

    def get_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        found: dict[str, Chunk] = {}
        for shard, ids in by_shard(tenant_id, chunk_ids, len(self.replicas)).items():
            found.update(self.replicas[shard].get_chunks(tenant_id, ids))
        return found

    def catch_up(self) -> int:
        return sum(r.catch_up() for r in self.replicas)

    def count(self, tenant_id: str) -> int:
        return sum(r.count(tenant_id) for r in self.replicas)

    def kinds(self, tenant_id: str) -> list[str]:
        """How each shard holding the tenant searches it ("flat" or "hnsw")."""
        return [k for r in self.replicas if (k := r.shard.kind_of(tenant_id)) is not None]

    def live_vectors(self, tenant_id: str) -> Vectors:
        """The tenant's live vectors over every shard (to time the same search done by FAISS
        alone)."""
        return np.concatenate([r.shard.live_vectors(tenant_id)[1] for r in self.replicas])

    def document_keys(self, tenant_id: str) -> set[tuple[str, str]]:
        """(source, doc_id) of every document with chunks in these replicas."""
        return set().union(*(r.documents(tenant_id) for r in self.replicas))

    def documents(self, tenant_id: str) -> int:
        return len(self.document_keys(tenant_id))

    def document_chunks(
        self, tenant_id: str, source: str, doc_id: str, access: TermExpr | None = None
    ) -> list[Chunk]:
        """The chunks of one document that `access` selects, from every shard."""
        return [
            c for r in self.replicas for c in r.document_chunks(tenant_id, source, doc_id, access)
        ]

    def document_summaries(
        self, tenant_id: str, access: TermExpr | None = None
    ) -> list[dict[tuple[str, str], tuple[int, str, str | None]]]:
        """Each shard's summaries of the tenant's documents that `access` selects."""
        return [r.document_summaries(tenant_id, access) for r in self.replicas]

    def offsets(self) -> list[int]:
        return [r.offset for r in self.replicas]
