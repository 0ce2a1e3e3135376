"""A read replica of one dense shard: its snapshot plus the write-ahead log replayed after it.

Replicas of a shard tail the log its single writer appends to; `catch_up()` applies what is
new, so every replica converges within the interval it is called at (the freshness bound),
and a restarted process replays whatever it missed since the snapshot.
"""

from __future__ import annotations

from pathlib import Path

from ragindex.config import HnswSpec
from ragindex.protocols import Vectors
from ragindex.shards.shard import DenseShard
from ragindex.shards.wal import UpsertRecord, WalRecord, WalTruncated, read_from
from ragindex.types import ModelIdentity, ScoredId

SNAPSHOT_DIR = "snapshot"
WAL_DIR = "wal"


def apply_record(shard: DenseShard, record: WalRecord) -> None:
    """Replay one logged write onto a shard."""
    if isinstance(record, UpsertRecord):
        shard.upsert(record.tenant_id, record.chunk_ids, record.vectors)
    else:
        shard.delete(record.tenant_id, record.chunk_ids)


class ShardReplica:
    """Snapshot + WAL replay of the shard stored in `directory` (snapshot/ and wal/)."""

    def __init__(
        self, directory: Path, hnsw: HnswSpec | None = None, exact_threshold: int | None = None
    ) -> None:
        self.directory = directory
        self._hnsw = hnsw
        self._exact_threshold = exact_threshold
        self.shard = self._load_snapshot()
        self.catch_up()

    def _load_snapshot(self) -> DenseShard:
        return DenseShard.load(self.directory / SNAPSHOT_DIR, self._hnsw, self._exact_threshold)

    @property
    def identity(self) -> ModelIdentity:
        return self.shard.identity

    @property
    def offset(self) -> int:
        """The WAL offset this replica has applied up to."""
        return self.shard.wal_offset

    def catch_up(self) -> int:
        """Apply records appended since the last call; returns how many were applied.

        If the log was truncated past this replica's offset, a newer snapshot covers the gap:
        reload it, then replay from its offset.
        """
        try:
            return self._replay()
        except WalTruncated:
            self.shard = self._load_snapshot()
            return self._replay()

    def _replay(self) -> int:
        applied = 0
        for record, end in read_from(self.directory / WAL_DIR, self.shard.wal_offset):
            apply_record(self.shard, record)
            self.shard.wal_offset = end
            applied += 1
        return applied

    def search(
        self, query_vector: Vectors, top_k: int, tenant_id: str, identity: ModelIdentity
    ) -> list[ScoredId]:
        return self.shard.search(query_vector, top_k, tenant_id, identity)
