"""The embedded runtime's in-process write and read paths, on the same data plane as Serve.

`ragindex ingest` appends documents to the file log's `docs` topic and runs the ingest worker
in this process until it has consumed them; `ragindex search` opens its own replica of every
view (dense shards with their text, BM25) from the log, under `replicas/cli/` of the data
directory, and searches it. While `ragindex serve` runs on the same data directory, its
Ingest replica is the log's writer: `ingest` is refused with a clear LogLocked error (post to
the server instead) and `search` reads alongside it.

`EmbeddedIndex` is both in one process: what `ragindex eval`, the gate, the sweep and the
benchmarks measure, so every published number describes the code `ragindex serve` runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from ragindex.app.generation_record import ensure_record
from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, ensure_topics, open_log, replica_dir
from ragindex.app.serve.query_side import LocalQuerySide
from ragindex.app.serve_cli import APP_NAME  # the served app's name names its topics
from ragindex.config import RagIndexSpec
from ragindex.ingest import IngestWorker, as_documents
from ragindex.lexical import LexicalView
from ragindex.models import SerializedEmbedder, load_embedder
from ragindex.protocols import Embedder, LexicalIndex
from ragindex.records import DocsRecord, docs_records, docs_tombstone
from ragindex.router import QueryEngine
from ragindex.shards import ReplicaDenseIndex
from ragindex.topics import plane_topics
from ragindex.types import Document, validate_tenant

CLI_REPLICA = "cli"
APPEND_BATCH = 64  # documents appended to `docs` and consumed before the next ones


class LogWriter:
    """This process as the data directory's one writer: it appends documents to `docs` and
    runs the ingest worker over every `docs` partition until it consumed them (what the
    served app's Ingest replica does), holding the log's writer lock until `close`."""

    def __init__(self, data_dir: Path, spec: RagIndexSpec, embedder: Embedder) -> None:
        self.topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
        self.log = open_log(data_dir)
        try:
            ensure_topics(self.log, self.topics)
            ensure_record(data_dir, spec)
        except BaseException:
            self.log.close()
            raise
        self.worker = IngestWorker(
            self.log, self.topics, embedder, spec.chunking, range(self.topics.docs_partitions)
        )

    def upsert(
        self,
        tenant_id: str,
        documents: Iterable[Document | Mapping[str, object]],
        batch: int = APPEND_BATCH,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Validate every document, then append them to `docs` batch by batch and consume
        them; returns how many."""
        tenant = validate_tenant(tenant_id)
        docs = as_documents(documents)
        for start in range(0, len(docs), batch):
            part = docs[start : start + batch]
            self._write(docs_records(tenant, part, self.topics.docs_partitions), batch)
            if progress is not None:
                progress(len(part))
        return len(docs)

    def delete(self, tenant_id: str, source: str, doc_id: str) -> None:
        """Append the document's tombstone to `docs` and consume it."""
        tenant = validate_tenant(tenant_id)
        self._write([docs_tombstone(tenant, source, doc_id, self.topics.docs_partitions)])

    def _write(self, records: Sequence[DocsRecord], batch: int = APPEND_BATCH) -> None:
        self.log.append(self.topics.docs, records)
        while self.worker.poll(max_records=batch):
            pass

    def close(self) -> None:
        self.log.close()


def ingest_through_log(
    data_dir: Path,
    spec: RagIndexSpec,
    embedder: Embedder,
    tenant_id: str,
    documents: Sequence[Document],
    batch: int = APPEND_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Append `documents` to `docs` batch by batch and consume them; returns how many."""
    writer = LogWriter(data_dir, spec, embedder)
    try:
        return writer.upsert(tenant_id, documents, batch, progress)
    finally:
        writer.close()


class EmbeddedIndex:
    """The embedded data plane in this process: writes go through the file log and the
    ingest worker (`LogWriter`), searches run on this process's own replicas of the views
    (`LocalQuerySide`: a dense replica per shard with its chunks' text, the BM25 view),
    caught up after every write. The views live under `replicas/<generation>/<replica>-0/`
    and are snapshotted at `close`, so a reopened index replays only what came after."""

    def __init__(
        self,
        data_dir: Path,
        spec: RagIndexSpec | None = None,
        *,
        embedder: Embedder | None = None,
        replica: str = CLI_REPLICA,
    ) -> None:
        """`embedder` may be shared by the caller (loaded from the spec when None)."""
        self.spec = spec = spec or RagIndexSpec()
        self.embedder = embedder or load_embedder(spec.embedder)
        self.writer = LogWriter(data_dir, spec, self.embedder)
        self.side = LocalQuerySide(
            spec,
            data_dir,
            APP_NAME,
            DEFAULT_NAMESPACE,
            replica_dir(data_dir, spec, replica, 0),
        )
        self.side.embedder = SerializedEmbedder(self.embedder)  # no query cache: it is measured
        try:
            opened = self.side.try_open()  # the writer created the topics
        except BaseException:
            self.writer.close()
            raise
        assert opened and self.side.engine is not None
        assert self.side.dense is not None and self.side.view is not None
        self.query: QueryEngine = self.side.engine
        self.dense: ReplicaDenseIndex = self.side.dense
        self.lexical: LexicalIndex = self.side.view.index

    def upsert(self, tenant_id: str, documents: Iterable[Document | Mapping[str, object]]) -> int:
        """Write `documents` through the log and apply them to every view: searchable on
        return (read-your-writes). Returns how many documents were written."""
        written = self.writer.upsert(tenant_id, documents)
        self.side.refresh()
        return written

    def delete(self, tenant_id: str, source: str, doc_id: str) -> None:
        """Delete one document through the log (a `docs` tombstone), applied on return."""
        self.writer.delete(tenant_id, source, doc_id)
        self.side.refresh()

    def lexical_view(self, index: LexicalIndex, offsets_path: Path) -> LexicalView:
        """Another BM25 view of this index's chunks in `index` (e.g. Elasticsearch beside the
        embedded tantivy view), applied from the log as the served Lexical deployment does
        once its `catch_up` is called; its offsets are kept in `offsets_path`."""
        assert self.side.log is not None
        return LexicalView(
            self.side.log, self.side.topics.chunks, self.spec.dense.shards, index, offsets_path
        )

    def close(self) -> None:
        self.side.close()
        self.writer.close()
