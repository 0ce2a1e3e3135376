"""Names and placement of an index's log topics: pure, shared by the operator and the app.

Names include the RagIndex namespace and name so that two indexes never share a topic, and the
generation for what a generation owns (DESIGN.md §2):
- `docs`: the compacted corpus, keyed tenant/source/doc_id, partitioned by key;
- `chunks.<generation>`: one partition per dense shard, keyed tenant/chunk id;
- `snapshots.<generation>`: one partition per dense shard, the shard snapshots serving replicas
  publish so that a new replica loads one instead of rebuilding its HNSW graph (not compacted:
  the publisher truncates it behind its newest snapshot).
The ingest workers' manifest (doc -> chunk ids and hashes) has no topic of its own: it is
derived from the compacted `chunks.<generation>` (whose keys and values carry it), so a worker
taking over a partition on another node rebuilds it from there.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from ragindex.config import RagIndexSpec
from ragindex.generations import index_generation, ingest_group

PREFIX = "ragindex"
INGEST_GROUP = "ingest"
MAX_RECORD_BYTES = 4_000_000
"""The largest `docs` record (key and value) the API takes (ragindex.records): a document of
MAX_DOCUMENT_CHARS characters fits in any script but the astral planes (emoji: 4 bytes each)."""
MAX_MESSAGE_BYTES = MAX_RECORD_BYTES + 65_536
"""Kafka's limit on a batch of records, one record of MAX_RECORD_BYTES with its framing: the
producer's message.max.bytes and the max.message.bytes of every topic the app or the operator
creates."""

OFFSETS_RETENTION_MINUTES = 10 * 365 * 24 * 60
"""Kafka's `offsets.retention.minutes` for the index's brokers: ten years, i.e. never in
practice. The ingest groups (`ingest.<generation>`) commit their `docs` offsets inside
transactions and never join as members, so Kafka expires their offsets that long after the
last commit; at its default (7 days) a quiet week loses them, and the next worker restart
reads `docs` again from offset 0. A retired generation's group is deleted with it."""
MIN_OFFSETS_RETENTION_MINUTES = 30 * 24 * 60
"""Below this `offsets.retention.minutes` (30 days) the Kafka log warns when an ingest worker
claims a partition: an idle spell that long would make its next restart re-read `docs`."""


def docs_topic(namespace: str, name: str) -> str:
    return f"{PREFIX}.{namespace}.{name}.docs"


def chunks_topic(namespace: str, name: str, generation: str) -> str:
    return f"{PREFIX}.{namespace}.{name}.chunks.{generation}"


def snapshots_topic(namespace: str, name: str, generation: str) -> str:
    return f"{PREFIX}.{namespace}.{name}.snapshots.{generation}"


def partition_for_key(key: bytes, partitions: int) -> int:
    """Stable placement of a key (crc32, identical across processes, runs and log backends)."""
    return zlib.crc32(key) % partitions


@dataclass(frozen=True)
class DataPlaneTopics:
    """The topics of one index generation and their partition counts."""

    docs: str
    chunks: str
    docs_partitions: int
    shards: int
    group: str = INGEST_GROUP  # the generation's ingest consumer group on `docs`


def plane_topics(spec: RagIndexSpec, name: str, namespace: str) -> DataPlaneTopics:
    """The `docs` and `chunks.<generation>` topics of index `namespace/name` at `spec`'s
    generation, with the generation's ingest group."""
    generation = index_generation(spec)
    return DataPlaneTopics(
        docs=docs_topic(namespace, name),
        chunks=chunks_topic(namespace, name, generation),
        docs_partitions=spec.log.docs_partitions,
        shards=spec.dense.shards,
        group=ingest_group(generation),
    )


def plane_snapshots_topic(spec: RagIndexSpec, name: str, namespace: str) -> str:
    return snapshots_topic(namespace, name, index_generation(spec))
