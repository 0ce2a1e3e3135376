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

PREFIX = "ragindex"


def docs_topic(namespace: str, name: str) -> str:
    return f"{PREFIX}.{namespace}.{name}.docs"


def chunks_topic(namespace: str, name: str, generation: str) -> str:
    return f"{PREFIX}.{namespace}.{name}.chunks.{generation}"


def snapshots_topic(namespace: str, name: str, generation: str) -> str:
    return f"{PREFIX}.{namespace}.{name}.snapshots.{generation}"


def partition_for_key(key: bytes, partitions: int) -> int:
    """Stable placement of a key (crc32, identical across processes, runs and log backends)."""
    return zlib.crc32(key) % partitions
