"""ragindex.shards: tenant-partitioned FAISS shards, each served as a replica of its partition of
`chunks.<generation>`, with snapshots.

- `DenseShard`: one FAISS shard (vectors and its chunks' text), by tenant partition
  (`TenantPartition`);
- `LogShardReplica`: a shard kept current from its log partition, snapshotting to
  `SnapshotTopic`;
- `ReplicaDenseIndex` (and its read side `ReadOnlyDense`): the shards of one process as one
  dense index; `by_shard`, `merge_by_score` route ids and merge hits across shards;
- `write_durable`, `fsync_dir`: crash-safe file writes.
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.shards.fsio import fsync_dir, write_durable
    from ragindex.shards.log_replica import LogShardReplica
    from ragindex.shards.partition import TenantPartition
    from ragindex.shards.replica_set import (
        ReadOnlyDense,
        ReplicaDenseIndex,
        by_shard,
        merge_by_score,
    )
    from ragindex.shards.shard import DenseShard
    from ragindex.shards.snapshot_log import SnapshotTopic

__all__ = [
    "DenseShard",
    "LogShardReplica",
    "ReadOnlyDense",
    "ReplicaDenseIndex",
    "SnapshotTopic",
    "TenantPartition",
    "by_shard",
    "fsync_dir",
    "merge_by_score",
    "write_durable",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "fsio": ["fsync_dir", "write_durable"],
            "log_replica": ["LogShardReplica"],
            "partition": ["TenantPartition"],
            "replica_set": ["ReadOnlyDense", "ReplicaDenseIndex", "by_shard", "merge_by_score"],
            "shard": ["DenseShard"],
            "snapshot_log": ["SnapshotTopic"],
        },
    )
