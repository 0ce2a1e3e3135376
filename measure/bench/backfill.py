"""`ragindex bench backfill`: documents/s of a generation backfill against the raw embedder's.

Both legs process the same Cranfield documents on the same embedder in one run, alternating
batch by batch (a busy box slows both alike):
- raw: chunk each document and embed its chunks (`embed_chunks`), nothing else;
- backfill: a fresh generation's ingest worker consumes the same documents from the file log's
  `docs` topic (appended before the clock starts) and commits its chunks, vectors and all, with
  its offsets, as `ragindex reindex` does.
The ratio (backfill / raw) is what the log, the manifest and the commits cost; it is compared
within one run because absolute figures on a shared 2-core box mean little.

With `--ray-data-actors N` a third leg runs right after, on the same log: the same replay as a
Ray Data job (`ragindex.measure.bench.ray_data_backfill`, `map_batches` over N embedder
actors) into a second chunks topic, timed with Ray already started but its actors' start-up
and model loads included; its chunk records must match the worker's (same keys, vectors
within 1e-4).
`ray_data_vs_backfill` is its documents/s over the worker's; `ray_data_steady_vs_backfill`
the same after its first output (actors up, models loaded); and, since back-to-back wall
times on a shared box move with its load, `ray_data_cpu_vs_backfill` compares CPU seconds
per document (the worker's process against the actors' batches plus the driver's reads and
appends; Ray's own daemons are not counted).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ragindex.app import APP_NAME, cranfield_dir
from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, ensure_topics, open_log
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.ingest import IngestWorker, chunk_for_embedder, embed_chunks
from ragindex.measure.bench.cli import checked, machine
from ragindex.measure.bench.ray_data_backfill import ray_data_backfill
from ragindex.measure.evals.collections import load_cranfield
from ragindex.measure.output import write_json
from ragindex.measure.stats import Goals, missed_goals
from ragindex.models import load_embedder
from ragindex.protocols import Log
from ragindex.records import decode_chunk, docs_records
from ragindex.topics import DataPlaneTopics, plane_topics

TENANT = "bench"
# Embedding dominates both legs; the log reads, manifest diffs and transactional commits may
# cost at most half of the raw rate (0.85-1.29 measured on a busy 2-core box, --docs 50/100).
GOALS: Goals = {"ratio": (">=", 0.5)}
# Float noise between batch compositions is ~1e-7; anything near 1e-4 is another computation.
SAME_VECTOR_ATOL = 1e-4


def chunk_vectors(log_: Log, topics: DataPlaneTopics, dimension: int) -> dict[bytes, np.ndarray]:
    """Chunk key -> vector of every chunk record in the generation's chunks topic."""
    out: dict[bytes, np.ndarray] = {}
    for shard in range(topics.shards):
        for r in log_.read(topics.chunks, shard, 0, max_records=1_000_000):
            if r.value is not None:
                out[r.key] = decode_chunk(r.value, dimension)[1]
    return out


def same_chunks(a: dict[bytes, np.ndarray], b: dict[bytes, np.ndarray]) -> list[str]:
    """Why two legs' chunk records differ (empty: same keys, vectors within the tolerance)."""
    if a.keys() != b.keys():
        return [f"chunk keys differ: {sorted(a.keys() ^ b.keys())[:3]}"]
    far = [k for k in a if not np.allclose(a[k], b[k], atol=SAME_VECTOR_ATOL)]
    return [f"vectors differ for {len(far)} chunks, e.g. {far[:3]}"] if far else []


def run_ray_data_leg(
    log_: Log, topics: DataPlaneTopics, spec: RagIndexSpec, actors: int
) -> dict[str, Any]:
    """The Ray Data leg over the log's `docs`, into a chunks topic of its own, on a local Ray
    of its own (Ray's auth mode is the environment's: this process imported Ray already)."""
    import ray

    target = replace(topics, chunks=f"{topics.chunks}.raydata")
    ensure_topics(log_, target)
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        run = ray_data_backfill(log_, topics, target, spec, actors)
    finally:
        ray.shutdown()
    dimension = load_embedder(spec.embedder).identity.dimension
    problems = same_chunks(
        chunk_vectors(log_, topics, dimension), chunk_vectors(log_, target, dimension)
    )
    if problems:
        raise RuntimeError("the Ray Data leg made other chunks than the worker: " + problems[0])
    return {
        "actors": actors,
        "chunks": run.chunks,
        "documents": run.documents,
        "seconds": run.seconds,
        "first_output_s": run.done_at[0][0] if run.done_at else 0.0,
        "steady_docs_per_s": run.steady_docs_per_s(),
        "actors_cpu_s": run.actors_cpu_s,
        "driver_cpu_s": run.driver_cpu_s,
    }


def run_backfill_bench(
    docs_count: int, spec: RagIndexSpec, batch: int = 50, ray_data_actors: int = 0
) -> dict[str, Any]:
    """Alternate the raw and worker legs batch by batch, so a busy box slows both alike; then
    the Ray Data leg, if asked, on the same log."""
    embedder = load_embedder(spec.embedder)
    corpus = load_cranfield(cranfield_dir())
    docs = [d.to_document("cranfield") for d in list(corpus.corpus.values())[:docs_count]]
    embedder.embed_passages(["warm up"])
    topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
    raw_s = backfill_s = backfill_cpu_s = 0.0
    chunks = 0
    with tempfile.TemporaryDirectory(prefix="ragindex-bench-backfill-") as tmp:
        log = open_log(Path(tmp))
        try:
            ensure_topics(log, topics)
            records = docs_records(TENANT, docs, topics.docs_partitions)
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
                started, cpu_started = time.perf_counter(), time.process_time()
                while worker.poll():
                    pass
                backfill_s += time.perf_counter() - started
                backfill_cpu_s += time.process_time() - cpu_started
            assert worker.lag() == 0
            ray_data = (
                run_ray_data_leg(log, topics, spec, ray_data_actors) if ray_data_actors else None
            )
        finally:
            log.close()
    result: dict[str, Any] = {
        "documents": len(docs),
        "chunks": chunks,
        "raw_docs_per_s": len(docs) / raw_s,
        "backfill_docs_per_s": len(docs) / backfill_s,
        "ratio": raw_s / backfill_s,
        "backfill_cpu_s": backfill_cpu_s,
        "machine": machine(),
    }
    if ray_data is not None:
        result["ray_data"] = ray_data
        result["ray_data_docs_per_s"] = len(docs) / ray_data["seconds"]
        result["ray_data_vs_backfill"] = backfill_s / ray_data["seconds"]
        result["ray_data_steady_vs_backfill"] = (
            ray_data["steady_docs_per_s"] / result["backfill_docs_per_s"]
        )
        # CPU seconds per document hardly move with the box's load, unlike wall time
        ray_data_cpu_s = ray_data["actors_cpu_s"] + ray_data["driver_cpu_s"]
        result["ray_data_cpu_vs_backfill"] = backfill_cpu_s / ray_data_cpu_s
    return result


def bench_backfill_command(args: argparse.Namespace) -> int:
    from ragindex.app import load_spec

    if args.ray_data_actors < 0:
        raise InvalidInput(
            f"--ray-data-actors must be 0 (no Ray Data leg) or more, not {args.ray_data_actors}"
        )
    result = run_backfill_bench(
        args.docs, load_spec(args.spec), ray_data_actors=args.ray_data_actors
    )
    print(
        f"{'documents':>10} {'chunks':>7} {'raw doc/s':>10} {'backfill doc/s':>15} {'ratio':>6}\n"
        f"{result['documents']:>10} {result['chunks']:>7} {result['raw_docs_per_s']:>10.1f}"
        f" {result['backfill_docs_per_s']:>15.1f} {result['ratio']:>6.2f}",
        file=sys.stdout,
    )
    if "ray_data" in result:
        print(
            f"Ray Data, actors={result['ray_data']['actors']}:"
            f" {result['ray_data_docs_per_s']:.1f} doc/s in all,"
            f" {result['ray_data_vs_backfill']:.2f}x the worker's backfill"
            f" (first output after {result['ray_data']['first_output_s']:.1f} s: actor start-up"
            f" and model loads); after it {result['ray_data']['steady_docs_per_s']:.1f} doc/s,"
            f" {result['ray_data_steady_vs_backfill']:.2f}x; CPU s per document"
            f" {result['ray_data_cpu_vs_backfill']:.2f}x as efficient (actors + driver vs worker)",
            file=sys.stdout,
        )
    if args.json:
        write_json(args.json, result)
    return checked(args, missed_goals(result, GOALS))
