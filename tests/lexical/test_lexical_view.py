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
