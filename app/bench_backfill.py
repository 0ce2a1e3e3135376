"""`ragindex bench backfill`: documents/s of a generation backfill against the raw embedder's.

Both legs process the same Cranfield documents on the same embedder in one run:
- raw: chunk every document and embed its chunks (`embed_chunks`), nothing else;
- backfill: a fresh generation's ingest worker replays the documents from the file log's
  `docs` topic and commits its chunks (vectors and all) with its offsets, as `ragindex
  reindex` does.
The ratio (backfill / raw) is what the log, the manifest and the commits cost; it is compared
within one run because absolute figures on a shared 2-core box mean little.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ragindex.app.bench_cli import machine, write_json
from ragindex.app.loading import cranfield_dir
from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, ensure_topics, open_log, plane_topics
from ragindex.app.serve_cli import APP_NAME
from ragindex.config import RagIndexSpec
from ragindex.evals.collections import load_cranfield
from ragindex.ingest.pipeline import chunk_for_embedder, embed_chunks
from ragindex.ingest.worker import IngestWorker
from ragindex.models.embedder import load_embedder
from ragindex.protocols import Embedder
from ragindex.records import doc_key, encode_document
from ragindex.topics import partition_for_key
from ragindex.types import Document

TENANT = "bench"


def raw_embed(embedder: Embedder, spec: RagIndexSpec, docs: list[Document]) -> tuple[float, int]:
    """Seconds to chunk and embed every document, and how many chunks."""
    started = time.perf_counter()
    chunks = [c for d in docs for c in chunk_for_embedder(embedder, spec.chunking, TENANT, d)]
    embed_chunks(embedder, chunks)
    return time.perf_counter() - started, len(chunks)


def backfill(embedder: Embedder, spec: RagIndexSpec, docs: list[Document], work: Path) -> float:
    """Seconds for a new generation's worker to replay `docs` into its chunks topic."""
    topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
    log = open_log(work)
    try:
        ensure_topics(log, topics)
        records = []
        for d in docs:
            key = doc_key(TENANT, d.source, d.doc_id)
            records.append(
                (partition_for_key(key, topics.docs_partitions), key, encode_document(d))
            )
        log.append(topics.docs, records)
        started = time.perf_counter()
        worker = IngestWorker(log, topics, embedder, spec.chunking, range(topics.docs_partitions))
        while worker.poll():
            pass
        elapsed = time.perf_counter() - started
        assert worker.lag() == 0
        return elapsed
    finally:
        log.close()


def run_backfill_bench(docs_count: int, spec: RagIndexSpec) -> dict[str, Any]:
    embedder = load_embedder(spec.embedder)
    corpus = load_cranfield(cranfield_dir())
    docs = [d.to_document("cranfield") for d in list(corpus.corpus.values())[:docs_count]]
    embedder.embed_passages(["warm up"])
    raw_s, chunks = raw_embed(embedder, spec, docs)
    with tempfile.TemporaryDirectory(prefix="ragindex-bench-backfill-") as tmp:
        backfill_s = backfill(embedder, spec, docs, Path(tmp))
    return {
        "documents": len(docs),
        "chunks": chunks,
        "raw_docs_per_s": len(docs) / raw_s,
        "backfill_docs_per_s": len(docs) / backfill_s,
        "ratio": raw_s / backfill_s,
        "machine": machine(),
    }


def bench_backfill_command(args: argparse.Namespace) -> int:
    from ragindex.app.engine import load_spec

    result = run_backfill_bench(args.docs, load_spec(args.spec))
    print(
        f"{'documents':>10} {'chunks':>7} {'raw doc/s':>10} {'backfill doc/s':>15} {'ratio':>6}\n"
        f"{result['documents']:>10} {result['chunks']:>7} {result['raw_docs_per_s']:>10.1f}"
        f" {result['backfill_docs_per_s']:>15.1f} {result['ratio']:>6.2f}",
        file=sys.stdout,
    )
    write_json(args.json, result)
    return 0
