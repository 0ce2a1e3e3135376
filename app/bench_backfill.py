"""`ragindex bench backfill`: documents/s of a generation backfill against the raw embedder's.

Both legs process the same Cranfield documents on the same embedder in one run, alternating
batch by batch (a busy box slows both alike):
- raw: chunk each document and embed its chunks (`embed_chunks`), nothing else;
- backfill: a fresh generation's ingest worker consumes the same documents from the file log's
  `docs` topic (appended before the clock starts) and commits its chunks, vectors and all, with
  its offsets, as `ragindex reindex` does.
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

from ragindex.app.bench_cli import checked, machine
from ragindex.app.loading import cranfield_dir
from ragindex.app.output import write_json
from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, ensure_topics, open_log, plane_topics
from ragindex.app.serve_cli import APP_NAME
from ragindex.config import RagIndexSpec
from ragindex.evals.collections import load_cranfield
from ragindex.ingest.pipeline import chunk_for_embedder, embed_chunks
from ragindex.ingest.worker import IngestWorker
from ragindex.measure import Goals, missed_goals
from ragindex.models.embedder import load_embedder
from ragindex.records import doc_key, encode_document
from ragindex.topics import partition_for_key

TENANT = "bench"
# Embedding dominates both legs; the log reads, manifest diffs and transactional commits may
# cost at most half of the raw rate (0.85-1.29 measured on a busy 2-core box, --docs 50/100).
GOALS: Goals = {"ratio": (">=", 0.5)}


def run_backfill_bench(docs_count: int, spec: RagIndexSpec, batch: int = 50) -> dict[str, Any]:
    """Alternate the two legs batch by batch, so a busy box slows both alike."""
    embedder = load_embedder(spec.embedder)
    corpus = load_cranfield(cranfield_dir())
    docs = [d.to_document("cranfield") for d in list(corpus.corpus.values())[:docs_count]]
    embedder.embed_passages(["warm up"])
    topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
    raw_s = backfill_s = 0.0
    chunks = 0
    with tempfile.TemporaryDirectory(prefix="ragindex-bench-backfill-") as tmp:
        log = open_log(Path(tmp))
        try:
            ensure_topics(log, topics)
            records = []
            for d in docs:
                key = doc_key(TENANT, d.source, d.doc_id)
                records.append(
                    (partition_for_key(key, topics.docs_partitions), key, encode_document(d))
                )
            worker = IngestWorker(
                log, topics, embedder, spec.chunking, range(topics.docs_partitions)
            )
            for start in range(0, len(docs), batch):
                part = docs[start : start + batch]
                started = time.perf_counter()
                cut = [
                    c for d in part for c in chunk_for_embedder(embedder, spec.chunking, TENANT, d)
                ]
                embed_chunks(embedder, cut)
                raw_s += time.perf_counter() - started
                chunks += len(cut)
                log.append(topics.docs, records[start : start + batch])  # the log already has it
                started = time.perf_counter()
                while worker.poll():
                    pass
                backfill_s += time.perf_counter() - started
            assert worker.lag() == 0
        finally:
            log.close()
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
    if args.json:
        write_json(args.json, result)
    return checked(args, missed_goals(result, GOALS))
