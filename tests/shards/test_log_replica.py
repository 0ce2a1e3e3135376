"""Dense shard replicas as views of `chunks.<generation>` on the real file log."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ragindex.config import HnswSpec
from ragindex.log import FileLog
from ragindex.records import chunk_key, encode_chunk
from ragindex.shards.log_replica import LogShardReplica
from ragindex.types import Chunk, ModelIdentity

IDENTITY = ModelIdentity("test-model", "0" * 64, 8, True)
TOPIC = "t.chunks.g1"


def chunk(tenant: str, n: int) -> Chunk:
    return Chunk(tenant, f"wiki:{n}:0", "wiki", str(n), 0, f"T{n}", f"text {n}", f"h{n}")


def vector(n: int) -> np.ndarray:
    v = np.zeros(8, np.float32)
    v[n % 8] = 1.0
    return v


def replica(log: FileLog, root: Path) -> LogShardReplica:
    return LogShardReplica(log, TOPIC, 0, root, IDENTITY, HnswSpec(), exact_threshold=1000)


def test_replays_the_partition_with_text_and_tombstones(tmp_path: Path) -> None:
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)
    log.append(
        TOPIC,
        [
            (0, chunk_key(t, f"wiki:{n}:0"), encode_chunk(chunk(t, n), vector(n)))
            for t in ("a", "b")
            for n in range(5)
        ],
    )
    log.append(TOPIC, [(0, chunk_key("a", "wiki:1:0"), None)])
    r = replica(log, tmp_path / "node1")
    assert r.catch_up() == 11 and r.offset == 11
    assert r.count("a") == 4 and r.count("b") == 5
    hits = r.search(vector(2)[None, :], 1, "a", IDENTITY)
    assert [h.chunk_id for h in hits] == ["wiki:2:0"]
    assert r.get_chunks("a", ["wiki:2:0", "wiki:1:0"])["wiki:2:0"].text == "text 2"
    assert "wiki:1:0" not in r.get_chunks("a", ["wiki:1:0"])
    assert r.get_chunks("b", ["wiki:2:0"])["wiki:2:0"].tenant_id == "b"  # per tenant


def test_restarts_from_its_snapshot_and_replays_only_the_rest(tmp_path: Path) -> None:
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)
    log.append(
        TOPIC,
        [
            (0, chunk_key("a", f"wiki:{n}:0"), encode_chunk(chunk("a", n), vector(n)))
            for n in range(4)
        ],
    )
    r = replica(log, tmp_path / "node1")
    r.catch_up()
    r.snapshot()
    log.append(TOPIC, [(0, chunk_key("a", "wiki:9:0"), encode_chunk(chunk("a", 9), vector(9)))])
    again = replica(log, tmp_path / "node1")
    assert again.offset == 4  # from the snapshot, not from 0
    assert again.catch_up() == 1
    assert again.count("a") == 5 and again.get_chunks("a", ["wiki:3:0"])["wiki:3:0"].title == "T3"
    fresh = replica(log, tmp_path / "node2")  # another node, no snapshot: from offset 0
    assert fresh.offset == 0 and fresh.catch_up() == 5 and fresh.count("a") == 5
