"""The interfaces between the parts. Implementations live in the edge packages.

Every search method takes `tenant_id` as a required argument and the implementation applies
the tenant filter inside the index (DESIGN.md invariant 1): there is no way to ask an index
for another tenant's chunks and filter afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ragindex.errors import RagIndexError
from ragindex.filters import TermExpr
from ragindex.types import Chunk, LogRecord, ModelIdentity, ScoredId

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    identity: ModelIdentity
    max_seq_length: int

    def embed_passages(self, texts: Sequence[str]) -> Vectors: ...

    def embed_queries(self, texts: Sequence[str]) -> Vectors: ...

    def count_tokens(self, text: str) -> int: ...


class Reranker(Protocol):
    def score(self, query: str, passages: Sequence[str]) -> list[float]: ...


class DenseIndex(Protocol):
    """Dense vectors partitioned by tenant; ids are chunk ids, unique within a tenant."""

    identity: ModelIdentity

    def upsert(self, tenant_id: str, chunk_ids: Sequence[str], vectors: Vectors) -> None: ...

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None: ...

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
        """Top-k of the tenant; with `access`, of the chunks it allows only, chosen inside the
        index (exact over them, or HNSW with an id selector: ragindex.filters.dense_plan).
        `with_chunks`: the first that many hits carry their chunk (`ScoredId.chunk`) where the
        index holds chunks (shard replicas); the others leave it to a fetch."""
        ...


class LexicalIndex(Protocol):
    """BM25 over chunk text; the tenant is a required clause inside the query.

    `versions` (one per chunk or id, increasing with each write of a key: the log offset of its
    record, plus one) let an index written by several replicas at once (Elasticsearch) keep
    the newest write of each chunk whatever order they arrive in; an index with one writer,
    which applies the log in order, may ignore them."""

    def upsert(self, chunks: Sequence[Chunk], *, versions: Sequence[int] | None = None) -> None: ...

    def delete(
        self, tenant_id: str, chunk_ids: Sequence[str], *, versions: Sequence[int] | None = None
    ) -> None: ...

    def search(
        self,
        query: str,
        top_k: int,
        tenant_id: str,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        """BM25 top-k of the tenant; `access` (ragindex.filters) runs as filter clauses.
        `with_chunks`: the first that many hits carry their chunk (`ScoredId.chunk`) where the
        backend stores whole chunks (tantivy); the others leave it to a fetch."""
        ...

    def count(self, tenant_id: str) -> int: ...

    def location(self) -> str:
        """Which store holds the documents, as exactly as the backend can say (Elasticsearch:
        the concrete index and its UUID, so an index made again counts as another): offsets
        applied to one location say nothing about another."""
        ...

    def close(self) -> None: ...


class WriterFenced(RagIndexError):
    """A newer writer claimed the input partition (`Log.claim`): this writer's later commits
    for it are refused; it lets the partition go, another worker owns it."""


class Log(Protocol):
    """A partitioned, replicated, keyed log: the source of truth every index is a view of.

    Implementations: the file log (one machine, fsynced segments) and Kafka (the cluster).
    Both pass one contract-test suite. Partitions are chosen by the caller (`partition_for_key`
    for `docs`, the dense shard for `chunks.<generation>`), so both agree on placement.
    Compacted topics keep at least the newest record of every key; a record whose value is
    None is a tombstone (a delete), removed by compaction after it has been read.
    """

    def ensure_topic(self, topic: str, partitions: int, *, compacted: bool) -> None:
        """Create the topic if absent; InvalidInput if it exists with another partition count."""
        ...

    def partitions(self, topic: str) -> int:
        """Partition count of an existing topic; InvalidInput if there is no such topic."""
        ...

    def delete_topic(self, topic: str) -> None:
        """Delete the topic and its records (e.g. a retired generation's chunks); nothing if
        it does not exist."""
        ...

    def append(self, topic: str, records: Sequence[tuple[int, bytes, bytes | None]]) -> list[int]:
        """Append (partition, key, value) records; return their offsets only once durable.

        Durable means fsynced (file log) or acknowledged by all in-sync replicas (Kafka,
        idempotent producer, acks=all). On failure nothing is acknowledged and the log stays
        readable: BackendUnavailable when the log cannot take writes now.
        """
        ...

    def append_and_commit(
        self,
        topic: str,
        records: Sequence[tuple[int, bytes, bytes | None]],
        *,
        group: str,
        consumed: Mapping[tuple[str, int], int],
    ) -> list[int]:
        """Append records and commit `group`'s consumed offsets atomically (read-process-write).

        `consumed` maps (topic, partition) to the next offset to read. Either both the records
        and the offsets become visible, or neither (a Kafka transaction; the file log writes
        one atomic batch). A worker killed mid-batch therefore neither loses nor duplicates.
        """
        ...

    def committed(self, group: str, topic: str, partition: int) -> int:
        """The next offset `group` should read from (0 if it never committed)."""
        ...

    def claim(self, group: str, topic: str, partition: int) -> int:
        """Become the one writer of `group`'s progress on this input partition and return the
        offset to resume from. Any earlier writer of it is fenced first (Kafka: the input's
        transactional id is initialised anew; its later `append_and_commit` for the partition
        raises WriterFenced), so no commit of the earlier writer can land after the offset
        returned here. The file log has one writer process: claiming takes its writer lock."""
        ...

    def read(
        self,
        topic: str,
        partition: int,
        from_offset: int,
        *,
        max_records: int = 1000,
        timeout_s: float = 0.0,
    ) -> list[LogRecord]:
        """Committed records at or after `from_offset`, in offset order (offsets may have gaps).

        Waits up to `timeout_s` for the first record when none is there yet. Raises
        OffsetOutOfRange when `from_offset` was compacted or truncated away. Read on from the
        last record's offset + 1; a reader is caught up when a read returns nothing (Kafka's
        transaction markers take offsets, so that position may stay below `end_offset`).
        """
        ...

    def end_offset(self, topic: str, partition: int) -> int:
        """The offset the next committed record will get (Kafka: the last stable offset)."""
        ...

    def begin_offset(self, topic: str, partition: int) -> int:
        """The oldest offset still readable; reading before it raises OffsetOutOfRange."""
        ...

    def truncate(self, topic: str, partition: int, before_offset: int) -> None:
        """Drop every record before `before_offset` (a snapshot covers them), so the log does
        not grow without bound; InvalidInput past the end offset."""
        ...

    def writer_problem(self) -> str | None:
        """Why this writer refuses every write now, or None (for readiness): the file log's
        fenced writer that could not reopen (the check tries); Kafka starts a new producer per
        failed write, so None (an unreachable broker shows in reads)."""
        ...

    def close(self) -> None: ...
