"""Two RagIndexes on one external Elasticsearch keep apart: the real server, a real file log
each, the real ingest worker and MiniLM, and the local Router's query side."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragindex.app.serve.data_plane import ensure_topics, open_log, replica_dir
from ragindex.app.serve.query_side import LocalQuerySide
from ragindex.config import RagIndexSpec
from ragindex.ingest import IngestWorker
from ragindex.measure.servers import EsServer
from ragindex.models import SerializedEmbedder
from ragindex.protocols import Embedder
from ragindex.records import docs_records
from ragindex.topics import plane_topics
from ragindex.types import Document

pytestmark = pytest.mark.elasticsearch

TENANT = "acme"
NAME = "handbook"  # the same RagIndex name in two namespaces


def ingest(data_dir: Path, spec: RagIndexSpec, namespace: str, word: str, minilm: Embedder) -> None:
    """One document, `wiki:d0`, whose text holds `word`, through the real ingest worker."""
    topics = plane_topics(spec, NAME, namespace)
    log = open_log(data_dir)
    try:
        ensure_topics(log, topics)
        doc = Document("wiki", "d0", "Glaciers", f"the {word} glacier carves a valley")
        log.append(topics.docs, docs_records(TENANT, [doc], topics.docs_partitions))
        worker = IngestWorker(log, topics, minilm, spec.chunking, range(topics.docs_partitions))
        while worker.poll():
            pass
    finally:
        log.close()


def test_two_indexes_sharing_an_elasticsearch_keep_their_chunks_apart(
    tmp_path: Path, es_server: EsServer, minilm: Embedder
) -> None:
    """With the default alias (`ragindex`) both wrote `ragindex-<generation>` (same spec, same
    generation) under the same `_id`s: the second index's chunk replaced the first's."""
    spec = RagIndexSpec.model_validate(
        {
            "dense": {"shards": 1},
            "lexical": {"backend": "elasticsearch", "elasticsearchUrl": es_server.url},
        }
    )
    words = {"team-a": "alpine", "team-b": "arctic"}
    sides: dict[str, LocalQuerySide] = {}
    try:
        for namespace, word in words.items():
            data_dir = tmp_path / namespace
            ingest(data_dir, spec, namespace, word, minilm)
            side = LocalQuerySide(
                spec, data_dir, NAME, namespace, replica_dir(data_dir, spec, "Router", 0)
            )
            side.embedder = SerializedEmbedder(minilm)
            sides[namespace] = side
            side.refresh()
        for namespace, word in words.items():
            assert sides[namespace].view is not None
            bm25 = sides[namespace].view.index
            other = next(w for n, w in words.items() if n != namespace)
            assert [h.chunk_id for h in bm25.search(word, 10, TENANT)] == ["wiki:d0:0"]
            assert bm25.search(other, 10, TENANT) == []
    finally:
        for side in sides.values():
            if side.view is not None:
                side.view.index.drop()  # type: ignore[attr-defined]  # Elasticsearch's
            side.close()
