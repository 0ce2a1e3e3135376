"""ragindex.shards: tenant-partitioned FAISS shards with a write-ahead log and snapshots."""

from ragindex.shards.replica import ShardReplica
from ragindex.shards.shard import DenseShard
from ragindex.shards.sharded import ShardedDenseIndex

__all__ = ["DenseShard", "ShardReplica", "ShardedDenseIndex"]
