"""Shard snapshots carried in the log: a fresh replica loads one, then replays only the tail;
a partial, corrupt or foreign snapshot is never loaded (replay from 0). On the file log and
on a real Kafka broker."""

from __future__ import annotations

import json
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ragindex.config import DenseIndexSpec, HnswSpec
from ragindex.log import FileLog, KafkaLog
from ragindex.measure.servers import KafkaServer
from ragindex.protocols import Log
from ragindex.records import chunk_key, encode_chunk
from ragindex.shards import LogShardReplica, SnapshotTopic, snapshot_log
from ragindex.shards.log_replica import publish_due
from ragindex.shards.snapshot_log import SnapshotSpool, snapshot_records
from ragindex.types import Chunk, LogRecord, ModelIdentity

DIM = 8
Record = tuple[bytes, bytes]
IDENTITY = ModelIdentity("test-model", "0" * 64, DIM, True)
OTHER = ModelIdentity("other-model", "1" * 64, DIM, True)
CHUNKS = 1500  # above the exact threshold: the published partition is an HNSW graph


def chunk(tenant: str, n: int) -> Chunk:
    text = f"text {n} " + "padding " * 80  # texts.json spans several 512 KiB records
    return Chunk(tenant, f"wiki:{n}:0", "wiki", str(n), 0, f"T{n}", text, f"h{n}")


def vector(n: int) -> np.ndarray:
    v = np.random.default_rng(n).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def upserts(tenant: str, numbers: range) -> list[tuple[int, bytes, bytes | None]]:
    return [
        (0, chunk_key(tenant, f"wiki:{n}:0"), encode_chunk(chunk(tenant, n), vector(n)))
        for n in numbers
    ]


@pytest.fixture(params=["file", pytest.param("kafka", marks=pytest.mark.kafka)])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Log]:
    if request.param == "file":
        opened: Log = FileLog(tmp_path / "log")
    else:
        server: KafkaServer = request.getfixturevalue("kafka_server")
        opened = KafkaLog(server.bootstrap)
    yield opened
    opened.close()


class Plane:
    """A chunks topic and its snapshots topic (unique names: the Kafka broker is shared)."""

    def __init__(self, log: Log, root: Path, index: DenseIndexSpec | None = None) -> None:
        name = uuid.uuid4().hex[:8]
        self.log, self.root, self.index = log, root, index
        self.chunks, self.snapshots = f"t{name}.chunks.g1", f"t{name}.snapshots.g1"
        log.ensure_topic(self.chunks, 1, compacted=True)

    def topic(self, identity: ModelIdentity = IDENTITY) -> SnapshotTopic:
        return SnapshotTopic(self.log, self.snapshots, 0, 1, self.chunks, identity)

    def replica(
        self,
        node: str,
        identity: ModelIdentity = IDENTITY,
        *,
        snapshots: bool = True,
        tombstone_retention_s: float | None = None,
    ) -> LogShardReplica:
        return LogShardReplica(
            self.log,
            self.chunks,
            0,
            self.root / node,
            identity,
            HnswSpec(m=16, ef_construction=64, ef_search=64),
            100,
            self.topic(identity) if snapshots else None,
            publish=node == "publisher",
            tombstone_retention_s=tombstone_retention_s,
            index=self.index,
        )


def answers(r: LogShardReplica) -> list[object]:
    hits = [r.search(vector(q)[None, :], 5, t, IDENTITY) for q in range(20) for t in ("a", "b")]
    texts = r.get_chunks("a", [f"wiki:{n}:0" for n in range(0, CHUNKS + 10, 97)])
    return [hits, {c: t.text[:12] for c, t in texts.items()}, r.count("a"), r.count("b")]


TRAINED = {"trainMin": 200, "ivf": {"nlist": 8, "nprobe": 4}}


@pytest.mark.parametrize(
    "index",
    [
        {"type": "hnsw_sq8", "trainMin": 200},
        {**TRAINED, "type": "ivf_pq", "pq": {"m": 4, "nbits": 6}},
        {**TRAINED, "type": "ivf_sq8", "refine": {"storage": "flat"}},
    ],
    ids=lambda index: index["type"],
)
def test_a_replica_of_each_index_type_bootstraps_from_the_published_snapshot(
    tmp_path: Path, index: dict[str, object]
) -> None:
    spec = DenseIndexSpec.model_validate(index)
    log = FileLog(tmp_path / "log")
    plane = Plane(log, tmp_path, spec)
    log.append(plane.chunks, upserts("a", range(600)) + upserts("b", range(50)))
    publisher = plane.replica("publisher")
    publisher.catch_up()
    publisher.snapshot()
    covered = publisher.offset
    tail = [
        *upserts("a", range(600, 605)),
        (0, chunk_key("a", "wiki:3:0"), None),
        (0, chunk_key("a", "wiki:4:0"), encode_chunk(chunk("a", 4), vector(9999))),
    ]
    log.append(plane.chunks, tail)
    fresh = plane.replica("node2")
    assert fresh.offset == covered  # from the published snapshot, not from 0
    assert fresh.catch_up() == len(tail) and publisher.catch_up() == len(tail)
    assert fresh.shard.kind_of("a") == spec.type and fresh.shard.kind_of("b") == "flat"
    assert fresh.shard.index == spec
    assert answers(fresh) == answers(publisher)
    assert fresh.count("a") == 604 and "wiki:3:0" not in fresh.get_chunks("a", ["wiki:3:0"])
    hits = fresh.search(vector(9999)[None, :], 1, "a", IDENTITY)
    assert hits[0].chunk_id == "wiki:4:0"  # the replaced vector, not the old one
    log.close()


def test_a_fresh_replica_loads_the_published_snapshot_and_replays_only_the_tail(
    log: Log, tmp_path: Path
) -> None:
    plane = Plane(log, tmp_path)
    log.append(plane.chunks, upserts("a", range(CHUNKS)) + upserts("b", range(50)))
    assert not plane.topic().ends_with_manifest()  # no snapshots topic yet
    publisher = plane.replica("publisher")
    publisher.catch_up()
    publisher.snapshot()  # the first one of the shard is published at once
    assert plane.topic().ends_with_manifest()
    covered = publisher.offset
    # the tail: new chunks and a tombstone, after the snapshot
    log.append(
        plane.chunks,
        [*upserts("a", range(CHUNKS, CHUNKS + 5)), (0, chunk_key("a", "wiki:3:0"), None)],
    )
    fresh = plane.replica("node2")
    assert fresh.offset == covered  # from the published snapshot, not from 0
    assert fresh.catch_up() == 6
    replayed = plane.replica("node3", snapshots=False)
    assert replayed.offset == 0 and replayed.catch_up() == CHUNKS + 50 + 6
    assert answers(fresh) == answers(replayed)
    assert "wiki:3:0" not in fresh.get_chunks("a", ["wiki:3:0"])
    # another embedding model identity never loads it
    assert plane.replica("node4", OTHER).offset == 0
    # a second snapshot supersedes the first: the topic holds one snapshot, not both
    fresh.publish, fresh.snapshots = True, plane.topic()
    fresh.snapshot()
    assert fresh.publish_snapshot()
    assert plane.replica("node5").offset == fresh.offset > covered
    begin = log.begin_offset(plane.snapshots, 0)
    kept = log.read(plane.snapshots, 0, begin, max_records=10_000)
    assert len({r.key.split(b"/")[0] for r in kept}) == 1


def test_a_publisher_behind_a_backlog_publishes_once_caught_up_what_a_fresh_replica_loads(
    log: Log, tmp_path: Path
) -> None:
    """Catching up in slices (as the served replicas do), the first snapshot a publisher puts
    in the log must say when it was caught up: a fresh replica with a tombstone retention
    refuses a snapshot caught up at an unknown time and replays everything."""
    plane = Plane(log, tmp_path)
    log.append(plane.chunks, upserts("a", range(CHUNKS)))
    publisher = plane.replica("publisher", tombstone_retention_s=3600)
    while publisher.catch_up(max_records=400):
        pass
    publisher.snapshot()
    assert plane.topic().ends_with_manifest()
    fresh = plane.replica("node2", tombstone_retention_s=3600)
    assert fresh.offset == publisher.offset == CHUNKS  # the published snapshot, not a replay


def test_a_partial_or_corrupt_snapshot_is_passed_over_and_replay_answers_the_same(
    log: Log, tmp_path: Path
) -> None:
    plane = Plane(log, tmp_path)
    log.append(plane.chunks, upserts("a", range(CHUNKS)))
    publisher = plane.replica("maker")  # publishes nothing itself
    publisher.catch_up()
    publisher.snapshot()
    files = {p.name: p for p in (publisher.directory / "snapshot").iterdir()}
    records = list(snapshot_records("bad", files, IDENTITY, plane.chunks, publisher.offset))
    key, value = records[0]
    corrupt = [(key, bytes([value[0] ^ 0xFF]) + value[1:]), *records[1:]]
    log.ensure_topic(plane.snapshots, 1, compacted=False)
    log.append(plane.snapshots, [(0, k, v) for k, v in corrupt])
    fresh = plane.replica("node2")
    assert fresh.offset == 0  # the corrupt snapshot was not loaded
    assert fresh.catch_up() == CHUNKS
    partial = list(snapshot_records("partial", files, IDENTITY, plane.chunks, publisher.offset))
    log.append(plane.snapshots, [(0, k, v) for k, v in partial[1:]])  # its first part lost
    again = plane.replica("node3")
    assert again.offset == 0 and again.catch_up() == CHUNKS
    assert answers(fresh) == answers(again) == answers(publisher)


def test_the_newest_complete_snapshot_wins_and_the_reasons_name_the_rest(tmp_path: Path) -> None:
    contents = {"manifest.json": b"{}", "g1-a.faiss": bytes(range(256)) * 3, "empty.json": b""}
    (tmp_path / "files").mkdir()
    files = {name: tmp_path / "files" / name for name in contents}
    for name, data in contents.items():
        files[name].write_bytes(data)

    def records_of(snapshot_id: str, identity: ModelIdentity, offset: int) -> list[Record]:
        return list(snapshot_records(snapshot_id, files, identity, "c", offset, part_bytes=100))

    old, new = records_of("old", IDENTITY, 10), records_of("new", IDENTITY, 20)
    foreign = records_of("foreign", OTHER, 30)
    # the empty file is one empty part, the manifest file one, 768 bytes 8 parts, the manifest
    assert len(old) == 1 + 1 + 8 + 1
    broken = new[:3] + new[4:]
    strange = records_of("strange", IDENTITY, 40)
    manifest = json.loads(strange[-1][1])
    manifest["files"][0]["name"] = "../escape.json"
    strange[-1] = (strange[-1][0], json.dumps(manifest).encode())
    records = [LogRecord(0, n, k, v) for n, (k, v) in enumerate(old + broken + foreign + strange)]
    (tmp_path / "spool").mkdir()
    with SnapshotSpool(tmp_path / "spool") as spool:
        spool.add(records)
        found, reasons = spool.newest_complete(IDENTITY, "c")
        assert found is not None and found.offset == 10
        assert {name: path.read_bytes() for name, path in found.files.items()} == contents
        assert reasons == [
            "snapshot strange: it names files outside its directory: ['../escape.json']",
            "snapshot foreign: another embedding model identity made it",
            "snapshot new: 1 part(s) of g1-a.faiss are missing",
        ]
        assert spool.newest_complete(IDENTITY, "other-topic")[0] is None
    assert not (tmp_path / "escape.json").exists()


def test_a_snapshot_is_published_in_many_appends_and_a_reader_passes_over_an_unfinished_one(
    log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot larger than one append goes into the log in several (one Kafka transaction
    each); a replica that starts while the next one is being appended loads the one before."""
    monkeypatch.setattr(snapshot_log, "APPEND_PARTS", 1)
    plane = Plane(log, tmp_path)
    log.append(plane.chunks, upserts("a", range(CHUNKS)))
    publisher = plane.replica("publisher")
    publisher.catch_up()
    appends: list[int] = []
    append = log.append
    monkeypatch.setattr(
        log, "append", lambda topic, records: appends.append(len(records)) or append(topic, records)
    )
    publisher.snapshot()
    assert len(appends) > 3 and set(appends) == {1}  # every part and the manifest on its own
    monkeypatch.undo()
    first = publisher.offset
    log.append(plane.chunks, upserts("a", range(CHUNKS, CHUNKS + 5)))
    publisher.catch_up()
    publisher.snapshot()
    files = {p.name: p for p in (publisher.directory / "snapshot").iterdir()}
    unfinished = list(snapshot_records("next", files, IDENTITY, plane.chunks, publisher.offset))
    log.append(plane.snapshots, [(0, k, v) for k, v in unfinished[:-1]])  # no manifest yet
    assert not plane.topic().ends_with_manifest()
    fresh = plane.replica("node2")
    assert fresh.offset == first  # the complete one
    assert fresh.catch_up() == 5
    assert answers(fresh) == answers(publisher)
    assert not (fresh.directory / "fetching").exists()


def test_publishing_is_rare_once_the_log_holds_a_snapshot() -> None:
    assert publish_due(1, 0.0, published=False)  # none in the log yet: the first one at once
    assert not publish_due(0, 1e9, published=False)
    assert not publish_due(19_999, 599.0, published=True)
    assert publish_due(20_000, 0.0, published=True) and publish_due(1, 600.0, published=True)


def test_publishing_and_fetching_hold_a_small_part_of_a_snapshot_in_memory(
    tmp_path: Path,
) -> None:
    """A snapshot is about its shard's index in size (~1 GB at 500 k vectors): the publisher
    streams it from disk and the reader spools it to disk, neither holding it whole."""
    (tmp_path / "files").mkdir()
    big = tmp_path / "files" / "g1-a.faiss"
    with open(big, "wb") as f:
        for _ in range(8):
            f.write(np.random.default_rng(0).bytes(16 << 20))
    (tmp_path / "files" / "manifest.json").write_bytes(b"{}")
    topic = SnapshotTopic(FileLog(tmp_path / "log"), "snapshots.g1", 0, 1, "chunks.g1", IDENTITY)
    half = big.stat().st_size // 2
    tracemalloc.start()
    try:
        assert topic.publish({p.name: p for p in (tmp_path / "files").iterdir()}, 7)
        published_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        (tmp_path / "spool").mkdir()
        found = topic.fetch(tmp_path / "spool")
        fetched_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert published_peak < half and fetched_peak < half
    assert found is not None and found.offset == 7
    assert found.files["g1-a.faiss"].read_bytes() == big.read_bytes()
