"""Which log, which topics, and where a replica keeps its node-local views.

- The log: Kafka when the operator injected bootstrap servers (KAFKA_BOOTSTRAP_ENV), else the
  file log in the data directory (the embedded runtime; one machine, one writer process: the
  Ingest replica, which is why documents are appended through it in every runtime).
- Topics: `docs` and `chunks.<generation>` of this index (ragindex.topics), created if absent,
  and `snapshots.<generation>`, where shard replicas publish snapshots (shards.snapshot_log):
  on Kafka the same cluster; on the file log (one writer: Ingest) a file log per shard beside
  it, each written by that shard's publishing replica (a process of its own in the cluster
  layout: a file log has one writer process).
- Replica storage: `<node root>/replicas/<generation>/<deployment>-<rank>/`, one per replica on its
  own node. The node root is NODE_ROOT_ENV where a node sets it (a node-local volume; each node
  of a multi-node test has its own), else the data directory. Nothing in it is shared: another
  node's replica builds its own from the log.
"""

from __future__ import annotations

import os
from pathlib import Path

from ragindex.config import KafkaConnection, RagIndexSpec
from ragindex.generations import index_generation
from ragindex.protocols import Log
from ragindex.serve_config import KAFKA_BOOTSTRAP_ENV
from ragindex.topics import DataPlaneTopics

DEFAULT_NAMESPACE = "default"
NODE_ROOT_ENV = "RAGINDEX_NODE_ROOT"
TAIL_WINDOW = 8  # offsets before the end that usually hold the last record and a commit marker


def open_log(data_dir: Path) -> Log:
    """Kafka if the pod was given brokers, else the file log under the data directory."""
    bootstrap = os.environ.get(KAFKA_BOOTSTRAP_ENV)
    if bootstrap:
        from ragindex.log import KafkaLog

        return KafkaLog(bootstrap, connection=KafkaConnection.from_env(os.environ))
    from ragindex.log import FileLog

    return FileLog(data_dir / "log")


def open_snapshot_log(data_dir: Path, log_: Log, shard: int) -> Log:
    """Where snapshots of `shard` are published and fetched: `log_` itself on Kafka; beside
    the file log, a file log of the shard's own (the first has one writer, Ingest; this one's
    is the shard's publishing replica)."""
    if os.environ.get(KAFKA_BOOTSTRAP_ENV):
        return log_
    from ragindex.log import FileLog

    return FileLog(data_dir / "snapshot-log" / f"shard-{shard:03d}")


def tombstone_retention_s(spec: RagIndexSpec) -> float | None:
    """How long the log keeps a tombstone: Kafka's topics keep it `tombstoneRetentionHours`
    (delete.retention.ms); the file log's compaction keeps every tombstone (None)."""
    if os.environ.get(KAFKA_BOOTSTRAP_ENV):
        return spec.log.tombstone_retention_hours * 3600.0
    return None


def ensure_topics(log_: Log, topics: DataPlaneTopics) -> None:
    log_.ensure_topic(topics.docs, topics.docs_partitions, compacted=True)
    log_.ensure_topic(topics.chunks, topics.shards, compacted=True)


def applied_target(log_: Log, topic: str, partition: int) -> int:
    """The offset after the last committed data record of a partition (its first offset if it
    has none): what a view must have applied to be current. Kafka's end offset sits past
    transaction markers, and past the records of aborted transactions (a worker fenced or
    timed out), which a view never sees: the window looks further back until it finds one."""
    begin, end = log_.begin_offset(topic, partition), log_.end_offset(topic, partition)
    window = TAIL_WINDOW
    while end > begin:
        start = max(begin, end - window)
        offsets = [r.offset for r in log_.read(topic, partition, start, max_records=end - start)]
        if below_end := [o for o in offsets if o < end]:
            return max(below_end) + 1
        end, window = start, window * 2
    return begin


def replica_dir(data_dir: Path, spec: RagIndexSpec, deployment: str, rank: int) -> Path:
    """This replica's node-local storage (snapshots, its BM25 index, its view offsets) for the
    spec's generation: two generations on one node never share a view."""
    root = Path(os.environ.get(NODE_ROOT_ENV) or data_dir)
    return root / "replicas" / index_generation(spec) / f"{deployment}-{rank}"


def replica_rank() -> int:
    """This Serve replica's rank in its deployment (0 outside Serve)."""
    from ray import serve

    try:
        return int(serve.get_replica_context().rank.rank)
    except Exception:  # not inside a replica (tests, the CLI)
        return 0
