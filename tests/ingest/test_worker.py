"""Ingest workers on the real file log: chunks produced and offsets committed exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from ragindex.config import ChunkingSpec
from ragindex.errors import BackendUnavailable
from ragindex.ingest import IngestWorker, assigned_partitions, chunk_for_embedder
from ragindex.ingest.worker import owned_partitions, read_all, rebuild_manifest
from ragindex.log import FileLog, KafkaLog
from ragindex.measure.servers import KafkaServer
from ragindex.protocols import Embedder, Log
from ragindex.records import chunk_header, doc_key, encode_document
from ragindex.topics import INGEST_GROUP, DataPlaneTopics, partition_for_key
from ragindex.types import Document

TOPICS = DataPlaneTopics(docs="t.docs", chunks="t.chunks.g1", docs_partitions=3, shards=2)


def open_log(path: Path) -> FileLog:
    log = FileLog(path)
    log.ensure_topic(TOPICS.docs, TOPICS.docs_partitions, compacted=True)
    log.ensure_topic(TOPICS.chunks, TOPICS.shards, compacted=True)
    return log


def put(
    log: Log,
    tenant: str,
    docs: Sequence[Document | tuple[str, str]],
    topics: DataPlaneTopics = TOPICS,
) -> None:
    records = []
    for d in docs:
        if isinstance(d, Document):
            key, value = doc_key(tenant, d.source, d.doc_id), encode_document(d)
        else:
            key, value = doc_key(tenant, *d), None
        records.append((partition_for_key(key, topics.docs_partitions), key, value))
    log.append(topics.docs, records)


def doc(n: int, text: str = "") -> Document:
    return Document("wiki", str(n), f"Doc {n}", text or f"Wing lift number {n}. " * 20)


def chunk_records(log: Log, topics: DataPlaneTopics = TOPICS) -> list[tuple[bytes, bytes | None]]:
    return [(r.key, r.value) for s in range(topics.shards) for r in read_all(log, topics.chunks, s)]


def live_chunks(log: Log, topics: DataPlaneTopics = TOPICS) -> dict[bytes, bytes]:
    state: dict[bytes, bytes | None] = {}
    for key, value in chunk_records(log, topics):
        state[key] = value
    return {k: v for k, v in state.items() if v is not None}


def test_owned_partitions_never_share_a_partition() -> None:
    owned = [owned_partitions(r, 3, 8) for r in range(3)]
    assert sorted(p for ps in owned for p in ps) == list(range(8))
    assert owned_partitions(0, 1, 4) == [0, 1, 2, 3]
    assert owned_partitions(3, 3, 8) == []  # an extra replica accepts writes, consumes nothing
    with pytest.raises(ValueError, match="rank -1"):
        owned_partitions(-1, 3, 8)


def test_running_workers_split_the_partitions_the_same_way_wherever_computed() -> None:
    running = {"b7", "a1", "c3"}
    shares = [assigned_partitions(m, running, 8) for m in sorted(running)]
    assert sorted(p for share in shares for p in share) == list(range(8))
    assert assigned_partitions("a1", ["c3", "a1", "b7"], 8) == shares[0]  # order-free
    assert assigned_partitions("gone", running, 8) == []  # not (or no longer) running
    assert assigned_partitions("a1", {"a1"}, 3) == [0, 1, 2]


def test_upsert_reingest_and_delete(tmp_path: Path, minilm: Embedder) -> None:
    log = open_log(tmp_path / "log")
    put(log, "acme", [doc(i) for i in range(4)])
    worker = IngestWorker(log, TOPICS, minilm, ChunkingSpec(), range(3))
    assert worker.poll() == 4 and worker.lag() == 0
    first = live_chunks(log)
    assert len(first) >= 4 and all(k.startswith(b"acme/wiki:") for k in first)

    produced = len(chunk_records(log))
    put(log, "acme", [doc(0), doc(1)])  # unchanged: nothing embedded, nothing produced
    worker.poll()
    assert len(chunk_records(log)) == produced and worker.lag() == 0

    put(log, "acme", [("wiki", "2")])  # a delete: tombstones for the document's chunks
    worker.poll()
    assert not any(k.startswith(b"acme/wiki:2:") for k in live_chunks(log))
    # a worker taking over rebuilds the same manifest from the chunks topic
    assert IngestWorker(log, TOPICS, minilm, ChunkingSpec(), range(3)).manifest == worker.manifest


class FailingCommit:
    """Fault injection: the next append_and_commit fails as a lost broker would."""

    def __init__(self, log: FileLog) -> None:
        self.log = log

    def __getattr__(self, name: str) -> object:
        return getattr(self.log, name)

    def append_and_commit(self, *args: object, **kwargs: object) -> list[int]:
        raise BackendUnavailable("log unavailable (injected)")


def test_failed_commit_is_redone_exactly_once(tmp_path: Path, minilm: Embedder) -> None:
    log = open_log(tmp_path / "log")
    put(log, "acme", [doc(i) for i in range(3)])
    broken = IngestWorker(FailingCommit(log), TOPICS, minilm, ChunkingSpec(), range(3))  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailable):
        broken.poll()
    assert chunk_records(log) == [] and broken.lag() == 3
    IngestWorker(log, TOPICS, minilm, ChunkingSpec(), range(3)).poll()
    counts = Counter(k for k, _ in chunk_records(log))
    assert counts and set(counts.values()) == {1}


class CommitFault:
    """Fault injection on the next append_and_commit while `armed`: it fails as a lost broker
    would (`lands=False`), or lands and then reports failure, as a Kafka commit_transaction
    that timed out after the broker committed (`lands=True`). Later calls go through."""

    def __init__(self, log: Log, *, lands: bool, armed: bool) -> None:
        self.log = log
        self.lands = lands
        self.armed = armed

    def __getattr__(self, name: str) -> object:
        return getattr(self.log, name)

    def append_and_commit(self, *args: object, **kwargs: object) -> list[int]:
        if not self.armed:
            return self.log.append_and_commit(*args, **kwargs)  # type: ignore[arg-type]
        self.armed = False
        if not self.lands:
            raise BackendUnavailable("log unavailable (injected)")
        self.log.append_and_commit(*args, **kwargs)  # type: ignore[arg-type]
        raise BackendUnavailable("commit timed out (injected: it landed)")


def grow_then_delete_after_an_ambiguous_commit(
    log: Log, worker_log: Log, arm: Callable[[], object], topics: DataPlaneTopics, minilm: Embedder
) -> None:
    """A document grows from 2 to 5 chunks in a batch whose commit lands but is reported
    failed; then it is deleted. Every one of its chunks must be gone."""
    worker = IngestWorker(worker_log, topics, minilm, ChunkingSpec(max_tokens=64), range(3))
    put(log, "acme", [doc(7, "Short passage about wings. " * 12)], topics)
    assert worker.poll(timeout_s=10) == 1
    before = [k for k in live_chunks(log, topics) if k.startswith(b"acme/wiki:7:")]
    arm()
    put(log, "acme", [doc(7, "A much longer passage about wings and lift. " * 60)], topics)
    with pytest.raises(BackendUnavailable):
        worker.poll(timeout_s=10)
    deadline = time.monotonic() + 10  # Kafka: the commit markers follow the failed call
    while len(
        grown := [k for k in live_chunks(log, topics) if k.startswith(b"acme/wiki:7:")]
    ) <= len(before):
        assert time.monotonic() < deadline, (before, grown)  # it landed
        time.sleep(0.2)
    put(log, "acme", [("wiki", "7")], topics)
    assert worker.poll(timeout_s=10) == 1
    assert [k for k in live_chunks(log, topics) if k.startswith(b"acme/wiki:7:")] == []
    assert worker.manifest == IngestWorker(log, topics, minilm, ChunkingSpec(), range(3)).manifest


def test_a_delete_after_a_commit_that_landed_but_reported_failure_removes_every_chunk(
    tmp_path: Path, minilm: Embedder
) -> None:
    log = open_log(tmp_path / "log")
    faulty = CommitFault(log, lands=True, armed=False)
    grow_then_delete_after_an_ambiguous_commit(
        log,
        faulty,
        lambda: setattr(faulty, "armed", True),
        TOPICS,
        minilm,  # type: ignore[arg-type]
    )


@pytest.mark.kafka
def test_a_kafka_commit_that_timed_out_after_landing_leaves_no_chunk_behind_on_delete(
    kafka_server: KafkaServer, minilm: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker commits the transaction, the client reports a timeout (injected around
    librdkafka's commit_transaction): the worker must not plan the next batch against the
    manifest as it was before that commit."""
    from confluent_kafka import KafkaError, KafkaException

    name = f"ambiguous{uuid.uuid4().hex[:8]}"
    topics = DataPlaneTopics(f"{name}.docs", f"{name}.chunks", docs_partitions=3, shards=2)
    log = KafkaLog(kafka_server.bootstrap)
    log.ensure_topic(topics.docs, 3, compacted=True)
    log.ensure_topic(topics.chunks, 2, compacted=True)
    worker_log = KafkaLog(kafka_server.bootstrap)
    commit = worker_log._commit_transaction

    def arm() -> None:
        def lands_then_times_out(producer: object) -> None:
            commit(producer)  # type: ignore[arg-type]
            monkeypatch.setattr(worker_log, "_commit_transaction", commit)
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "injected: it landed"))

        monkeypatch.setattr(worker_log, "_commit_transaction", lands_then_times_out)

    try:
        grow_then_delete_after_an_ambiguous_commit(log, worker_log, arm, topics, minilm)
    finally:
        worker_log.close()
        log.close()


def test_the_same_worker_redoes_a_failed_batch_from_the_committed_offsets(
    tmp_path: Path, minilm: Embedder
) -> None:
    """A worker remembers where it reads next; after a failed commit it reads the committed
    offsets again, so the retried batch (the Ingest loop's retry) is neither skipped nor doubled."""
    log = open_log(tmp_path / "log")
    put(log, "acme", [doc(i) for i in range(6)])
    worker = IngestWorker(
        CommitFault(log, lands=False, armed=True), TOPICS, minilm, ChunkingSpec(), range(3)
    )  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailable):
        worker.poll()
    while worker.poll():
        pass
    assert worker.lag() == 0
    counts = Counter(k for k, _ in chunk_records(log))
    assert len(counts) >= 6 and set(counts.values()) == {1}


def test_one_poll_embeds_every_partition_together_and_traces_its_steps(
    tmp_path: Path, minilm: Embedder
) -> None:
    """Documents spread over every partition are embedded in one batch and each partition is
    committed with its own offset; the poll's trace says what it held and when each step ended."""
    log = open_log(tmp_path / "log")
    docs = [doc(i) for i in range(9)]
    put(log, "acme", docs)
    spread = {partition_for_key(doc_key("acme", d.source, d.doc_id), 3) for d in docs}
    assert spread == {0, 1, 2}  # the test needs every partition to hold some
    worker = IngestWorker(log, TOPICS, minilm, ChunkingSpec(), range(3))
    before = time.time()
    assert worker.poll() == 9
    (trace,) = worker.traces
    assert trace.partitions == (0, 1, 2) and trace.records == 9
    assert trace.embedded == len(live_chunks(log)) >= 9
    assert (
        before
        <= trace.started_at
        <= trace.read_at
        <= trace.planned_at
        <= trace.embedded_at
        <= trace.committed_at
    )
    assert all(log.committed(INGEST_GROUP, TOPICS.docs, p) > 0 for p in range(3))
    assert worker.poll() == 0 and len(worker.traces) == 1  # an empty poll leaves no trace


def test_the_batch_read_ahead_is_planned_against_the_one_still_committing(
    tmp_path: Path, minilm: Embedder
) -> None:
    """A document rewritten shorter in the next batch: that batch is read and planned while the
    first one commits, so its plan must tombstone the chunks only the first batch added."""
    log = open_log(tmp_path / "log")
    long_text = " ".join(f"Sentence {n} about boundary layers and heat." for n in range(120))
    put(log, "acme", [doc(1, long_text)])
    put(log, "acme", [doc(1, "Now one short passage.")])
    first = chunk_for_embedder(minilm, ChunkingSpec(), "acme", doc(1, long_text))
    assert len(first) > 1  # the test needs the first version to have chunks the second lacks
    worker = IngestWorker(log, TOPICS, minilm, ChunkingSpec(), range(3))
    assert worker.poll(max_records=1) == 1  # the first version; the second was read ahead
    assert worker._ahead is not None
    assert worker.poll(max_records=1) == 1 and worker.poll(max_records=1) == 0
    second = chunk_for_embedder(minilm, ChunkingSpec(), "acme", doc(1, "Now one short passage."))
    assert set(live_chunks(log)) == {f"acme/{c.chunk_id}".encode() for c in second}
    assert worker.manifest == rebuild_manifest(log, TOPICS, range(3))[0]


def test_progress_names_the_chunk_offsets_of_what_the_worker_committed(
    tmp_path: Path, minilm: Embedder
) -> None:
    """A wait is answered from the worker's progress: the `docs` records it processed, and per
    chunks partition the offset after its last chunk record; a record committed before the
    worker took the partition over is not its to answer for."""
    log = open_log(tmp_path / "log")
    put(log, "acme", [doc(i) for i in range(6)])
    earlier = IngestWorker(log, TOPICS, minilm, ChunkingSpec(), range(3))
    earlier.poll()
    before = {p: log.committed(INGEST_GROUP, TOPICS.docs, p) for p in range(3)}
    worker = IngestWorker(log, TOPICS, minilm, ChunkingSpec(), range(3))
    put(log, "acme", [doc(i, "Rotor blade flutter. " * 20) for i in range(6)])
    assert worker.progress.chunk_ends == (0, 0)  # nothing committed by this worker yet
    assert worker.poll() == 6
    progress = worker.progress
    ends = tuple(max(r.offset for r in read_all(log, TOPICS.chunks, s)) + 1 for s in range(2))
    assert progress.chunk_ends == ends  # the changed documents' new chunks and tombstones
    for p in range(3):
        end = log.committed(INGEST_GROUP, TOPICS.docs, p)
        assert progress.processes(p, end) and progress.processed(p, end)
        assert not progress.processes(p, before[p])  # the earlier worker's record
        assert not progress.processed(p, end + 1)


_WORKER = """
import sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from ragindex.config import ChunkingSpec, RagIndexSpec
from ragindex.ingest.worker import IngestWorker
from ragindex.topics import DataPlaneTopics
from ragindex.ingest.pipeline import chunk_for_embedder
from ragindex.log import FileLog
from ragindex.log.kafka_log import KafkaLog
from ragindex.log.kafka_log import KafkaLog
from ragindex.models.embedder import load_embedder
kind, where, docs, chunks = sys.argv[1:5]
log = FileLog(Path(where)) if kind == "file" else KafkaLog(where)
topics = DataPlaneTopics(docs=docs, chunks=chunks, docs_partitions=3, shards=2)
worker = IngestWorker(log, topics, load_embedder(RagIndexSpec().embedder), ChunkingSpec(), range(3))
print("ready", flush=True)
while True:
    worker.poll(max_records=4)
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["file", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_kill_9_mid_batch_then_restart(
    kind: str, tmp_path: Path, minilm: Embedder, request: pytest.FixtureRequest
) -> None:
    """A worker killed -9 while it embeds and commits: after a restart every document's chunks
    are there exactly once (one upsert record per chunk id, counts per tenant match)."""
    name = f"kill{uuid.uuid4().hex[:8]}"  # the Kafka broker is shared by the session
    topics = DataPlaneTopics(f"{name}.docs", f"{name}.chunks", docs_partitions=3, shards=2)
    if kind == "file":
        where = str(tmp_path / "log")

        def open_any() -> Log:
            return FileLog(Path(where))
    else:
        where = request.getfixturevalue("kafka_server").bootstrap

        def open_any() -> Log:
            return KafkaLog(where)

    log = open_any()
    log.ensure_topic(topics.docs, 3, compacted=True)
    log.ensure_topic(topics.chunks, 2, compacted=True)
    docs = {t: [doc(i, f"{t} passage {i}. " * 60) for i in range(12)] for t in ("acme", "beta")}
    for tenant, batch in docs.items():
        put(log, tenant, batch, topics)
    log.close()  # the file log has one writer process: the worker's
    log = open_any()  # this process only reads until the worker is dead
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen(
        [sys.executable, "-c", _WORKER, kind, where, topics.docs, topics.chunks],
        stdout=subprocess.PIPE,
        env=env,
    )

    def committed() -> int:
        return sum(log.committed(INGEST_GROUP, topics.docs, p) for p in range(3))

    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 300
        while committed() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # kill once some, but not all, batches committed
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert 0 < committed() < 24

    worker = IngestWorker(open_any(), topics, minilm, ChunkingSpec(), range(3))
    while worker.poll():
        pass
    assert worker.lag() == 0
    counts = Counter(k for k, _ in chunk_records(log, topics))
    assert set(counts.values()) == {1}, "a chunk was produced twice"
    for tenant, batch in docs.items():
        want = {
            f"{tenant}/{c.chunk_id}".encode()
            for d in batch
            for c in chunk_for_embedder(minilm, ChunkingSpec(), tenant, d)
        }
        got = {k for k in live_chunks(log, topics) if k.startswith(f"{tenant}/".encode())}
        assert got == want


def test_newer_updated_wins_and_acl_travels_with_every_chunk(
    tmp_path: Path, minilm: Embedder
) -> None:
    log = open_log(tmp_path / "log")
    worker = IngestWorker(log, TOPICS, minilm, ChunkingSpec(), range(3))
    text = "Wing lift at high angle of attack. " * 10

    def version(updated: str, acl: tuple[str, ...] | None, lang: str) -> Document:
        return Document("wiki", "v", "V", text, updated, {"lang": lang}, acl)

    put(log, "acme", [version("2024-05-02", ("group:eng",), "en")])
    put(log, "acme", [version("2024-05-01", None, "de")])  # older, arrives later: ignored
    while worker.poll():
        pass
    (header,) = [chunk_header(v) for v in live_chunks(log).values()]
    assert (header.acl, header.metadata["lang"], header.updated) == (
        ("group:eng",), "en", "2024-05-02",
    )  # fmt: skip
    put(log, "acme", [version("2024-05-03T00:00:00Z", ("user:ann",), "fr")])
    while worker.poll():
        pass
    (header,) = [chunk_header(v) for v in live_chunks(log).values()]
    assert (header.acl, header.metadata["lang"]) == (("user:ann",), "fr")  # a new ACL re-indexes
    # a worker taking over knows the indexed version too
    again = IngestWorker(log, TOPICS, minilm, ChunkingSpec(), range(3))
    assert again.versions == worker.versions
    put(log, "acme", [version("2024-05-02", None, "de")])
    while again.poll():
        pass
    assert [chunk_header(v).acl for v in live_chunks(log).values()] == [("user:ann",)]


@pytest.mark.kafka
def test_a_partition_taken_over_mid_stream_is_processed_exactly_once(
    kafka_server: KafkaServer, minilm: Embedder
) -> None:
    """Rebalancing: a second worker claims two of the first one's partitions while documents
    keep coming. The first worker's next commit on them is fenced and it lets them go; the
    second carries on from the committed offsets. No chunk is produced twice or lost."""
    name = f"rebal{uuid.uuid4().hex[:8]}"
    topics = DataPlaneTopics(f"{name}.docs", f"{name}.chunks", docs_partitions=3, shards=2)
    log = KafkaLog(kafka_server.bootstrap)
    log.ensure_topic(topics.docs, 3, compacted=True)
    log.ensure_topic(topics.chunks, 2, compacted=True)
    first_batch = [doc(i, f"first passage {i}. " * 30) for i in range(9)]
    second_batch = [doc(i, f"second passage {i}. " * 30) for i in range(9, 18)]
    put(log, "acme", first_batch, topics)
    first = IngestWorker(KafkaLog(kafka_server.bootstrap), topics, minilm, ChunkingSpec(), range(3))
    first.poll(max_records=2)  # part of the first batch, on every partition
    put(log, "acme", second_batch, topics)
    moved = [1, 2]
    second = IngestWorker(KafkaLog(kafka_server.bootstrap), topics, minilm, ChunkingSpec(), moved)
    while first.poll(max_records=2):
        pass
    assert first.partitions == [0]  # fenced on 1 and 2, it let them go
    assert first.manifest == rebuild_manifest(log, topics, [0])[0]  # and their entries
    while second.poll(max_records=2):
        pass
    assert first.lag() == 0 and second.lag() == 0
    counts = Counter(k for k, _ in chunk_records(log, topics))
    assert set(counts.values()) == {1}, "a chunk was produced twice"
    want = {
        f"acme/{c.chunk_id}".encode()
        for d in first_batch + second_batch
        for c in chunk_for_embedder(minilm, ChunkingSpec(), "acme", d)
    }
    assert set(live_chunks(log, topics)) == want
    for client in (log, first.log, second.log):
        client.close()
