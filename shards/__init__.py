"""ragindex.shards: tenant-partitioned FAISS shards, each served as a replica of its partition of
`chunks.<generation>` (log_replica), with snapshots."""

from ragindex.shards.shard import DenseShard

__all__ = ["DenseShard"]
