"""A retired generation applied again is rebuilt from the start of `docs` (issue #29, item 5).

Retiring a generation deletes its `chunks.<generation>` and `snapshots.<generation>` topics (the
embedded runtime's `retire_expired`; in the cluster the operator prunes their KafkaTopics), but
its ingest group's committed offsets on `docs` are another thing: a worker of the same
generation applied again must not resume from them over an empty chunks topic, or only the
documents written since would be indexed. Real file log and real Kafka; real MiniLM.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ragindex.app.generation_record import write_record
from ragindex.app.reindex import retire_expired
from ragindex.app.serve.data_plane import (
    DEFAULT_NAMESPACE,
    ensure_topics,
    open_snapshot_log,
)
from ragindex.app.serve_cli import APP_NAME
from ragindex.config import ChunkingSpec, RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.generations import GenerationEntry, GenerationRecord, index_generation
from ragindex.ingest.worker import IngestWorker
from ragindex.log import FileLog
from ragindex.log.kafka_log import KafkaLog
from ragindex.measure.servers.kafka import KafkaServer
from ragindex.protocols import Embedder, Log
from ragindex.topics import DataPlaneTopics, plane_snapshots_topic, plane_topics

from .test_worker import doc, live_chunks, put

SERVING = RagIndexSpec.model_validate({"dense": {"shards": 2}, "log": {"docsPartitions": 3}})
RETIRED = RagIndexSpec.model_validate({"dense": {"shards": 3}, "log": {"docsPartitions": 3}})
DOCS = 6


def _drain(worker: IngestWorker) -> int:
    done = 0
    while n := worker.poll():
        done += n
    assert worker.lag() == 0
    return done


def _indexed_docs(log: Log, topics: DataPlaneTopics) -> set[bytes]:
    return {k.rsplit(b":", 1)[0] for k in live_chunks(log, topics)}


def test_a_retired_generation_reapplied_on_the_file_log_is_rebuilt_from_offset_0(
    tmp_path: Path, minilm: Embedder
) -> None:
    """File log: build generation R, retire it (`retire_expired`), apply R again: its worker
    reads `docs` from offset 0 and every document is indexed again; R's snapshots are gone."""
    log = FileLog(tmp_path / "log")
    topics = plane_topics(RETIRED, APP_NAME, DEFAULT_NAMESPACE)
    ensure_topics(log, topics)
    put(log, "acme", [doc(i) for i in range(DOCS)], topics)
    assert _drain(IngestWorker(log, topics, minilm, RETIRED.chunking, range(3))) == DOCS
    assert len(_indexed_docs(log, topics)) == DOCS
    # One of R's replicas published a snapshot of its shard (offsets of R's chunks topic).
    snapshot_topic = plane_snapshots_topic(RETIRED, APP_NAME, DEFAULT_NAMESPACE)
    snapshots = open_snapshot_log(tmp_path, log, 0)
    snapshots.ensure_topic(snapshot_topic, RETIRED.dense.shards, compacted=False)
    snapshots.append(snapshot_topic, [(0, b"snapshot", b"of the retired chunks topic")])
    snapshots.close()
    # S serves; R was retained for rollback a day and more ago: past its window.
    as_json = {s: s.model_dump(mode="json", by_alias=True) for s in (SERVING, RETIRED)}
    record = GenerationRecord(
        active=index_generation(SERVING),
        generations={
            index_generation(SERVING): GenerationEntry(as_json[SERVING], "serving", 0.0),
            index_generation(RETIRED): GenerationEntry(as_json[RETIRED], "retained", 0.0),
        },
    )
    write_record(tmp_path, record)
    assert index_generation(RETIRED) not in retire_expired(tmp_path, log, 3 * 86400).generations
    with pytest.raises(InvalidInput):
        log.partitions(topics.chunks)

    ensure_topics(log, topics)  # R applied again
    again = IngestWorker(log, topics, minilm, RETIRED.chunking, range(3))
    assert again.committed_offsets() == {0: 0, 1: 0, 2: 0}
    assert [log.committed(topics.group, topics.docs, p) for p in range(3)] == [0, 0, 0]
    assert _drain(again) == DOCS
    assert len(_indexed_docs(log, topics)) == DOCS
    snapshots = open_snapshot_log(tmp_path, log, 0)
    with pytest.raises(InvalidInput):  # no snapshot of the old chunks topic is loaded
        snapshots.partitions(snapshot_topic)


@pytest.mark.kafka
def test_a_retired_generation_reapplied_on_kafka_is_rebuilt_from_offset_0(
    kafka_server: KafkaServer, minilm: Embedder
) -> None:
    """Kafka: build generation R, retire it as the cluster does (the operator prunes its
    KafkaTopics: chunks and snapshots deleted, the `ingest.<R>` group's offsets stay), apply R
    again: its worker reads `docs` from offset 0 and every document is indexed again."""
    name = f"reapply{uuid.uuid4().hex[:8]}"  # the broker is shared by the session
    topics = DataPlaneTopics(
        f"{name}.docs", f"{name}.chunks.g1", docs_partitions=3, shards=2, group=f"ingest.{name}"
    )
    log = KafkaLog(kafka_server.bootstrap)
    try:
        ensure_topics(log, topics)
        put(log, "acme", [doc(i) for i in range(DOCS)], topics)
        assert _drain(IngestWorker(log, topics, minilm, ChunkingSpec(), range(3))) == DOCS
        assert len(_indexed_docs(log, topics)) == DOCS
        log.delete_topic(topics.chunks)  # retired: the KafkaTopic pruned

        ensure_topics(log, topics)  # R applied again: its KafkaTopic made anew
        again = IngestWorker(log, topics, minilm, ChunkingSpec(), range(3))
        assert again.committed_offsets() == {0: 0, 1: 0, 2: 0}
        assert [log.committed(topics.group, topics.docs, p) for p in range(3)] == [0, 0, 0]
        assert _drain(again) == DOCS
        assert len(_indexed_docs(log, topics)) == DOCS
    finally:
        log.close()
