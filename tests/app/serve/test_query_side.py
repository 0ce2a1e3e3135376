"""The local Router's query side: readiness while its views replay the log (#16).

A real file log with real chunks (the real ingest worker, real MiniLM); the only mock is the
fault: applying records to the dense view blocks until the test releases it, as a replay of
100 k chunks keeps the views thread busy for minutes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from ragindex.app import APP_NAME
from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, ensure_topics, open_log, replica_dir
from ragindex.app.serve.query_side import LocalQuerySide, catching_up
from ragindex.config import RagIndexSpec
from ragindex.ingest import IngestWorker
from ragindex.models import SerializedEmbedder
from ragindex.protocols import Embedder
from ragindex.records import doc_key, encode_document
from ragindex.shards import LogShardReplica, ReplicaDenseIndex
from ragindex.topics import partition_for_key, plane_topics
from ragindex.types import Document

TENANT = "acme"
DOCS = 6
PROMPTLY_S = 5.0  # generous: the answer must not wait for the blocked catch-up (minutes)
MEETS_S = 30.0  # generous: the other shard's search starts within milliseconds when at once


def test_catching_up_names_each_view_that_is_behind() -> None:
    progress = {"dense": [3, 5], "lexical": [3, 2]}
    assert catching_up(progress, [3, 5]) == "lexical shard 1 at 2 of 5"
    assert catching_up(progress, [3, 2]) is None
    assert catching_up({"dense": [0, 0]}, [4, 0]) == "dense shard 0 at 0 of 4"


@pytest.fixture
def data_dir(tmp_path: Path, minilm: Embedder) -> Path:
    """A data dir whose `chunks` topic holds the chunks of DOCS documents."""
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2}})
    topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
    log = open_log(tmp_path)
    try:
        ensure_topics(log, topics)
        records = []
        for n in range(DOCS):
            doc = Document("wiki", f"d{n}", f"Doc {n}", f"glacier number {n} carves a valley")
            key = doc_key(TENANT, doc.source, doc.doc_id)
            records.append(
                (partition_for_key(key, topics.docs_partitions), key, encode_document(doc))
            )
        log.append(topics.docs, records)
        worker = IngestWorker(log, topics, minilm, spec.chunking, range(topics.docs_partitions))
        while worker.poll():
            pass
    finally:
        log.close()
    return tmp_path


@pytest.fixture
def blocked_apply(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, ...]]:
    """Fault: the dense view's apply waits for `release` (and says it started in `entered`)."""
    entered, release = threading.Event(), threading.Event()
    original = LogShardReplica._apply

    def slow_apply(self: LogShardReplica, records: Any) -> None:
        entered.set()
        assert release.wait(120), "the test never released the catch-up"
        original(self, records)

    monkeypatch.setattr(LogShardReplica, "_apply", slow_apply)
    yield entered, release
    release.set()


def test_readiness_answers_while_the_views_replay_the_log(
    data_dir: Path, minilm: Embedder, blocked_apply: tuple[threading.Event, ...]
) -> None:
    entered, release = blocked_apply
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2}})
    side = LocalQuerySide(
        spec, data_dir, APP_NAME, DEFAULT_NAMESPACE, replica_dir(data_dir, spec, "Router", 0)
    )
    side.embedder = SerializedEmbedder(minilm)
    assert side.readiness() == (
        False,
        "opening the views: waiting for Ingest to create the index's topics",
    )
    with ThreadPoolExecutor(1) as views_thread:  # as the Router's views thread runs it
        opening = views_thread.submit(side.refresh)
        assert entered.wait(60), "the catch-up never started"
        start = time.monotonic()
        ready, why = side.readiness()
        assert time.monotonic() - start < PROMPTLY_S
        assert not ready
        assert why.startswith("catching up with the log: dense shard 0 at 0 of ")
        assert "lexical shard 1 at 0 of " in why
        assert not opening.done()  # it answered while the catch-up was still blocked
        release.set()
        opening.result(timeout=120)
    try:
        assert side.readiness() == (True, "ok")
        hits = side.search(TENANT, "glacier valley", 10, "hybrid", False).hits
        assert {h.chunk.doc_id for h in hits} == {f"d{n}" for n in range(DOCS)}
    finally:
        side.close()


@pytest.fixture
def side(data_dir: Path, minilm: Embedder) -> Iterator[LocalQuerySide]:
    """The local query side over `data_dir`'s log, its views open."""
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2}})
    opened = LocalQuerySide(
        spec, data_dir, APP_NAME, DEFAULT_NAMESPACE, replica_dir(data_dir, spec, "Router", 0)
    )
    opened.embedder = SerializedEmbedder(minilm)
    assert opened.try_open()
    yield opened
    opened.close()


def test_the_dense_shards_are_searched_at_once(
    side: LocalQuerySide, minilm: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault: each shard's search waits for the other's to have started; it returns promptly
    only when the two are searched at the same time. The hits are the sequential ones."""
    assert side.dense is not None
    vector = minilm.embed_queries(["glacier valley"])
    sequential = ReplicaDenseIndex(side.dense.replicas, side.dense.identity)
    expected = sequential.search(vector, 10, TENANT, minilm.identity)
    started = {0: threading.Event(), 1: threading.Event()}
    met: dict[int, bool] = {}
    search = LogShardReplica.search

    def waiting_search(self: LogShardReplica, *args: Any, **kwargs: Any) -> Any:
        started[self.partition].set()
        met[self.partition] = started[1 - self.partition].wait(MEETS_S)
        if self.partition == 1 and fail_second.is_set():
            raise RuntimeError("shard 1 failed")
        return search(self, *args, **kwargs)

    fail_second = threading.Event()
    monkeypatch.setattr(LogShardReplica, "search", waiting_search)
    assert side.dense.search(vector, 10, TENANT, minilm.identity) == expected
    assert met == {0: True, 1: True}
    assert len(expected) == DOCS
    for event in started.values():
        event.clear()
    fail_second.set()  # a shard's error is the search's error
    with pytest.raises(RuntimeError, match="shard 1 failed"):
        side.dense.search(vector, 10, TENANT, minilm.identity)


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_the_bm25_legs_hits_carry_the_shard_replicas_chunks_not_stored_documents(
    side: LocalQuerySide, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Fault: reading a chunk from tantivy's stored documents fails the search. The hits come
    with the chunks the shard replicas hold."""
    assert side.dense is not None and side.engine is not None
    search_lexical = side.engine.lexical.search

    def carried_lexical(*args: Any, **kwargs: Any) -> Any:
        hits = search_lexical(*args, **kwargs)
        carried.extend(h.chunk for h in hits[: kwargs["with_chunks"]])
        return hits

    def stored_chunk(*_: Any) -> None:
        raise AssertionError("the BM25 leg read a chunk from tantivy's stored documents")

    carried: list[Any] = []
    monkeypatch.setattr(side.engine.lexical, "search", carried_lexical)
    monkeypatch.setattr("ragindex.lexical.tantivy_index.stored_chunk", stored_chunk)
    result = side.search(TENANT, "glacier valley", 4, mode, False)
    assert len(result.hits) == 4 and len(carried) == 4
    held = side.dense.get_chunks(TENANT, [c.chunk_id for c in carried])
    assert all(c is held[c.chunk_id] for c in carried)  # the replicas' own objects
    if mode == "lexical":
        assert [h.chunk for h in result.hits] == carried
