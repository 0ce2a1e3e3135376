"""Which log, which topics, and where a replica keeps its node-local views.

- The log: Kafka when the operator injected bootstrap servers (KAFKA_BOOTSTRAP_ENV), else the
  file log in the data directory (the embedded runtime; one machine, one writer process: the
  Ingest replica, which is why documents are appended through it in every runtime).
- Topics: `docs` and `chunks.<generation>` of this index (ragindex.topics), created if absent.
- Replica storage: `<node root>/replicas/<generation>/<deployment>-<rank>/`, one per replica on its
  own node. The node root is NODE_ROOT_ENV where a node sets it (a node-local volume; each node
  of a multi-node test has its own), else the data directory. Nothing in it is shared: another
  node's replica builds its own from the log.
"""

from __future__ import annotations

import os
from pathlib import Path

from ragindex.config import RagIndexSpec
from ragindex.generations import index_generation, ingest_group
from ragindex.ingest.worker import DataPlaneTopics
from ragindex.protocols import Log
from ragindex.serve_config import KAFKA_BOOTSTRAP_ENV, KAFKA_PASSWORD_ENV, KAFKA_USERNAME_ENV
from ragindex.topics import chunks_topic, docs_topic

DEFAULT_NAMESPACE = "default"
NODE_ROOT_ENV = "RAGINDEX_NODE_ROOT"


def docs_partitions(spec: RagIndexSpec) -> int:
    """Partitions of `docs` (spec.log.docsPartitions where the spec has it)."""
    log_spec = getattr(spec, "log", None)
    return int(getattr(log_spec, "docs_partitions", 4))


def plane_topics(spec: RagIndexSpec, name: str, namespace: str) -> DataPlaneTopics:
    generation = index_generation(spec)
    return DataPlaneTopics(
        docs=docs_topic(namespace, name),
        chunks=chunks_topic(namespace, name, generation),
        docs_partitions=docs_partitions(spec),
        shards=spec.dense.shards,
        group=ingest_group(generation),
    )


def open_log(data_dir: Path) -> Log:
    """Kafka if the pod was given brokers, else the file log under the data directory."""
    bootstrap = os.environ.get(KAFKA_BOOTSTRAP_ENV)
    if bootstrap:
        from ragindex.log.kafka_log import KafkaLog

        user, password = os.environ.get(KAFKA_USERNAME_ENV), os.environ.get(KAFKA_PASSWORD_ENV)
        return KafkaLog(bootstrap, username=user, password=password)
    from ragindex.log import FileLog

    return FileLog(data_dir / "log")


def ensure_topics(log_: Log, topics: DataPlaneTopics) -> None:
    log_.ensure_topic(topics.docs, topics.docs_partitions, compacted=True)
    log_.ensure_topic(topics.chunks, topics.shards, compacted=True)


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
