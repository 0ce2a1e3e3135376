"""Vectors served as `ragindex serve` serves chunks, for the dense benchmarks.

Each vector becomes a chunk record in a file log's `chunks` topic, in the partition of its
dense shard (as the ingest worker writes them); one LogShardReplica per shard applies its
partition, and searches fan out over the replicas and merge by score (ReplicaDenseIndex, the
local Router's dense leg). So a dense curve measures the served view, not a copy of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragindex.config import DenseSpec, HnswSpec
from ragindex.hashing import shard_for
from ragindex.log import FileLog
from ragindex.protocols import Vectors
from ragindex.records import chunk_key, encode_chunk
from ragindex.shards import LogShardReplica, ReplicaDenseIndex
from ragindex.types import Chunk, ModelIdentity

CHUNKS = "chunks"
APPEND_BATCH = 5_000


def vector_chunk(
    tenant_id: str,
    chunk_id: str,
    metadata: Mapping[str, Any] | None = None,
    acl: tuple[str, ...] | None = None,
) -> Chunk:
    """The chunk a benchmark's vector stands for: an id `source:doc:n`, no text."""
    source, doc_id, n = chunk_id.split(":")
    return Chunk(tenant_id, chunk_id, source, doc_id, int(n), "", "", "",
                 metadata=dict(metadata or {}), acl=acl)  # fmt: skip


class ServedVectors:
    """A file log under `root` whose `chunks` topic holds the written vectors, and the shard
    replicas that serve them."""

    def __init__(self, root: Path, identity: ModelIdentity, dense: DenseSpec) -> None:
        self.root = root
        self.identity = identity
        self.dense = dense
        self.log = FileLog(root / "log")
        self.log.ensure_topic(CHUNKS, dense.shards, compacted=True)

    def write(self, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        """Append each chunk with its vector to its shard's partition of `chunks`."""
        for start in range(0, len(chunks), APPEND_BATCH):
            part = zip(
                chunks[start : start + APPEND_BATCH],
                vectors[start : start + APPEND_BATCH],
                strict=True,
            )
            self.log.append(
                CHUNKS,
                [
                    (
                        shard_for(c.tenant_id, c.chunk_id, self.dense.shards),
                        chunk_key(c.tenant_id, c.chunk_id),
                        encode_chunk(c, v),
                    )
                    for c, v in part
                ],
            )

    def replicas(
        self, hnsw: HnswSpec | None = None, exact_threshold: int | None = None
    ) -> ReplicaDenseIndex:
        """A replica of every shard (under `root/replicas`) caught up with the log and
        snapshotted: the first call replays the log, later ones load those snapshots with
        `hnsw` (e.g. another efSearch) instead of building the graphs again. No snapshot is
        left being written beside the searches that follow."""
        threshold = self.dense.exact_threshold if exact_threshold is None else exact_threshold
        replicas = [
            LogShardReplica(
                self.log,
                CHUNKS,
                shard,
                self.root / "replicas" / f"shard-{shard:03d}",
                self.identity,
                hnsw or self.dense.hnsw,
                threshold,
                index=self.dense.index,
            )
            for shard in range(self.dense.shards)
        ]
        for replica in replicas:
            if replica.catch_up():
                replica.snapshot()
        return ReplicaDenseIndex(replicas, self.identity)

    def close(self) -> None:
        self.log.close()
