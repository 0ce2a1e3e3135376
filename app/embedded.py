"""The embedded runtime's in-process write and read paths, on the same data plane as Serve.

`ragindex ingest` appends documents to the file log's `docs` topic and runs the ingest worker
in this process until it has consumed them; `ragindex search` opens its own replica of every
view (dense shards with their text, BM25) from the log, under `replicas/cli/` of the data
directory, and searches it. While `ragindex serve` runs on the same data directory, its
Ingest replica is the log's writer: `ingest` is refused with a clear LogLocked error (post to
the server instead) and `search` reads alongside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ragindex.app.generations import ensure_record
from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, ensure_topics, open_log, plane_topics
from ragindex.app.serve_cli import APP_NAME  # the served app's name names its topics
from ragindex.config import RagIndexSpec
from ragindex.ingest.pipeline import as_documents
from ragindex.ingest.worker import IngestWorker
from ragindex.protocols import Embedder
from ragindex.records import doc_key, encode_document
from ragindex.topics import partition_for_key
from ragindex.types import Document, validate_tenant

CLI_REPLICA = "cli"


def ingest_through_log(
    data_dir: Path,
    spec: RagIndexSpec,
    embedder: Embedder,
    tenant_id: str,
    documents: Sequence[Document],
    batch: int = 64,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Append `documents` to `docs` batch by batch and consume them; returns how many."""
    tenant = validate_tenant(tenant_id)
    docs = as_documents(documents)
    topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
    log = open_log(data_dir)
    try:
        ensure_topics(log, topics)
        ensure_record(data_dir, spec)
        worker = IngestWorker(log, topics, embedder, spec.chunking, range(topics.docs_partitions))
        for start in range(0, len(docs), batch):
            part = docs[start : start + batch]
            records = []
            for d in part:
                key = doc_key(tenant, d.source, d.doc_id)
                records.append(
                    (partition_for_key(key, topics.docs_partitions), key, encode_document(d))
                )
            log.append(topics.docs, records)
            while worker.poll(max_records=batch):
                pass
            if progress is not None:
                progress(len(part))
    finally:
        log.close()
    return len(docs)
