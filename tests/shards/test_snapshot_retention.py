"""A replica that comes back after `delete.retention.ms` must not load a snapshot older than
the tombstones the log still keeps (issue #29, item 4). Real Kafka, with a tombstone retention
of 100 ms and an eager cleaner standing in for `tombstoneRetentionHours` having passed."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from ragindex.config import HnswSpec
from ragindex.log import KafkaLog
from ragindex.measure.servers.kafka import KafkaServer
from ragindex.records import chunk_key, encode_chunk
from ragindex.shards.log_replica import LogShardReplica
from ragindex.testing.log import read_all
from ragindex.types import Chunk, ModelIdentity

pytestmark = [pytest.mark.kafka]

IDENTITY = ModelIdentity("test-model", "0" * 64, 8, True)
# Tombstones kept 100 ms, segments rolled every 100 ms, the cleaner eager: retention passes.
SHORT_TOMBSTONE_RETENTION = {
    "delete.retention.ms": "100",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
}
CLEANER_WAIT_S = 90


def chunk(n: int) -> Chunk:
    return Chunk("acme", f"wiki:{n}:0", "wiki", str(n), 0, f"T{n}", f"text {n}", f"h{n}")


def vector(n: int) -> np.ndarray:
    v = np.zeros(8, np.float32)
    v[n % 8] = 1.0
    return v


def upsert(n: int) -> tuple[int, bytes, bytes]:
    return (0, chunk_key("acme", f"wiki:{n}:0"), encode_chunk(chunk(n), vector(n)))


def test_a_snapshot_older_than_the_tombstone_retention_is_not_loaded(
    kafka_server: KafkaServer, tmp_path: Path
) -> None:
    """Chunk 1 upserted, the replica snapshots, chunk 1 deleted, the broker compacts the
    tombstone away; the replica comes back on its old snapshot: chunk 1 must not be served."""
    topic = f"retention{time.monotonic_ns()}.chunks.g1"
    log = KafkaLog(kafka_server.bootstrap, topic_config=SHORT_TOMBSTONE_RETENTION)
    try:
        log.ensure_topic(topic, 1, compacted=True)
        log.append(topic, [upsert(1), upsert(2)])
        first = LogShardReplica(log, topic, 0, tmp_path, IDENTITY, HnswSpec(), 1000)
        first.catch_up()
        first.snapshot()  # the replica's node-local snapshot, at the offset after chunk 2
        covered = first.offset
        # Within the retention the snapshot is what a restarted replica starts from.
        again = LogShardReplica(
            log, topic, 0, tmp_path, IDENTITY, HnswSpec(), 1000, tombstone_retention_s=3600
        )
        assert again.start_offset == covered
        log.append(topic, [(0, chunk_key("acme", "wiki:1:0"), None)])  # chunk 1 deleted
        # Retention passes: more writes roll segments until the cleaner has dropped the
        # tombstone from what a replay from the snapshot's offset reads.
        deadline = time.monotonic() + CLEANER_WAIT_S
        while any(r.value is None for r in read_all(log, topic, 0, covered)):
            assert time.monotonic() < deadline, "the broker's cleaner never dropped the tombstone"
            log.append(topic, [upsert(3)])
            time.sleep(0.3)

        back = LogShardReplica(
            log, topic, 0, tmp_path, IDENTITY, HnswSpec(), 1000, tombstone_retention_s=0.1
        )
        assert back.start_offset == 0  # the snapshot was refused: replayed from the start
        back.catch_up()
        assert back.get_chunks("acme", ["wiki:1:0"]) == {}, "a deleted chunk is served again"
        assert set(back.get_chunks("acme", ["wiki:2:0", "wiki:3:0"])) == {"wiki:2:0", "wiki:3:0"}
        hits = back.search(vector(1)[None, :], 5, "acme", IDENTITY)
        assert "wiki:1:0" not in {h.chunk_id for h in hits}
    finally:
        log.close()
