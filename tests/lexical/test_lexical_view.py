"""The BM25 view's stored offsets against the real Elasticsearch: they hold only for the index
they were applied to (`lexical.backend`, URL or alias changed in place replays the log)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from ragindex.lexical import ElasticsearchIndex, LexicalView, TantivyIndex
from ragindex.log import FileLog
from ragindex.measure.servers import EsServer
from ragindex.records import chunk_key, encode_chunk
from ragindex.types import Chunk

pytestmark = pytest.mark.elasticsearch

TOPIC = "t.chunks.g1"
CHUNKS = 12


@pytest.fixture
def log(tmp_path: Path) -> Iterator[FileLog]:
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 2, compacted=True)
    chunks = [
        Chunk("a", f"wiki:{n}:0", "wiki", str(n), 0, "", f"lift {n}", f"h{n}")
        for n in range(CHUNKS)
    ]
    log.append(
        TOPIC,
        [
            (n % 2, chunk_key("a", c.chunk_id), encode_chunk(c, np.ones(4, np.float32)))
            for n, c in enumerate(chunks)
        ],
    )
    yield log
    log.close()


def test_a_view_moved_to_another_backend_or_alias_replays_the_log_into_it(
    log: FileLog, es_server: EsServer, new_alias: Callable[[], str], tmp_path: Path
) -> None:
    """The offsets file said "caught up" to whichever index opened it next: switching
    lexical.backend (or the alias) in place left the new index empty forever."""
    offsets = tmp_path / "replica" / "bm25-offsets.json"
    tantivy = TantivyIndex.open(tmp_path / "replica" / "lexical")
    assert LexicalView(log, TOPIC, 2, tantivy, offsets).catch_up() == CHUNKS
    tantivy.close()

    first, second = (
        ElasticsearchIndex.open(es_server.url, new_alias(), refresh_interval_s=0.2)
        for _ in range(2)
    )
    try:
        assert LexicalView(log, TOPIC, 2, first, offsets).catch_up() == CHUNKS  # backend changed
        assert first.count("a") == CHUNKS
        assert LexicalView(log, TOPIC, 2, second, offsets).catch_up() == CHUNKS  # alias changed
        assert second.count("a") == CHUNKS
        assert LexicalView(log, TOPIC, 2, second, offsets).catch_up() == 0  # same index: resumes
        second.drop()  # deleted and made again (e.g. by hand): a new index, replayed
        second.ensure_generation()
        assert LexicalView(log, TOPIC, 2, second, offsets).catch_up() == CHUNKS
        assert second.count("a") == CHUNKS
    finally:
        for index in (first, second):
            index.drop()
            index.close()


def test_a_replica_replaying_from_the_start_never_undoes_a_newer_write(
    es_server: EsServer, new_alias: Callable[[], str], tmp_path: Path
) -> None:
    """Lexical replicas share one Elasticsearch index, each at its own offsets: a replica
    replaying from 0 wrote old versions over new ones and re-added deleted chunks until it
    caught up (#29 item 6). Writes carry their record's offset as an external version."""
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)

    def chunk(n: int, text: str) -> Chunk:
        return Chunk("a", f"wiki:{n}:0", "wiki", str(n), 0, "", text, text)

    def put(c: Chunk | None, n: int) -> None:
        value = None if c is None else encode_chunk(c, np.ones(4, np.float32))
        log.append(TOPIC, [(0, chunk_key("a", f"wiki:{n}:0"), value)])

    put(chunk(1, "old lighthouse"), 1)
    put(chunk(1, "new beacon"), 1)
    put(chunk(2, "deleted harbour"), 2)
    put(None, 2)
    alias = new_alias()
    current = ElasticsearchIndex.open(es_server.url, alias, refresh_interval_s=0.2)
    replaying = ElasticsearchIndex.open(es_server.url, alias, refresh_interval_s=0.2)
    try:
        caught_up = LexicalView(log, TOPIC, 1, current, tmp_path / "a" / "bm25-offsets.json")
        assert caught_up.catch_up() == 4
        fresh = LexicalView(log, TOPIC, 1, replaying, tmp_path / "b" / "bm25-offsets.json")
        assert fresh.catch_up(max_records=1) == 1  # chunk 1's first version only
        assert [h.chunk_id for h in current.search("beacon", 5, "a")] == ["wiki:1:0"]
        assert current.search("lighthouse", 5, "a") == []
        assert fresh.catch_up(max_records=2) == 2  # chunk 2's upsert, not yet its tombstone
        assert current.search("harbour", 5, "a") == [] and current.count("a") == 1
        assert fresh.catch_up() == 1 and current.count("a") == 1
    finally:
        current.drop()
        current.close()
        replaying.close()
        log.close()
