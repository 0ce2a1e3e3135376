"""A generation backfill as a Ray Data job: the `docs` replay through an embedder actor pool.

`ray.data` `map_batches` runs `ChunkAndEmbed` on a pool of actors with fractional CPUs: each
loads the generation's embedder once, chunks its batch of documents with the ingest worker's
chunker (`chunk_for_embedder`) and embeds them (`embed_chunks`), and returns the
`chunks.<generation>` records an ingest worker would append (shard, key, encoded chunk); the
driver appends them. A replay into an empty generation has no manifest to diff against, so
the driver reads the corpus as of the end of `docs` (each key's newest value, deletes
dropped) and every chunk is new.

`ragindex bench backfill --ray-data-actors N` measures it against the ingest worker's
backfill in the same run (#12: use the faster one for the bulk job).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragindex.app.serve.generation_report import end_offsets, live_documents
from ragindex.app.serve.threads import limit_threads
from ragindex.config import RagIndexSpec
from ragindex.hashing import shard_for
from ragindex.ingest import chunk_for_embedder, embed_chunks
from ragindex.models import load_embedder
from ragindex.protocols import Log
from ragindex.records import (
    DocKey,
    chunk_key,
    decode_document,
    doc_of_chunk,
    encode_chunk,
    encode_document,
    split_chunk_key,
)
from ragindex.topics import DataPlaneTopics

BATCH_DOCS = 16  # documents per map_batches call (the embedder batches their chunks itself)
ACTOR_CPUS = 0.5  # fractional, so a pool of 2 and Ray Data's own work fit on 2 cores


class ChunkAndEmbed:
    """One actor of the pool: the generation's embedder, loaded once, on one thread."""

    def __init__(self, spec_json: dict[str, Any], shards: int) -> None:
        limit_threads()
        self.spec = RagIndexSpec.model_validate(spec_json)
        self.embedder = load_embedder(self.spec.embedder)
        self.shards = shards

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        cpu_started = time.process_time()
        chunks = []
        for key, value in zip(batch["key"], batch["value"], strict=True):
            doc = DocKey.decode(bytes(key))
            chunks += chunk_for_embedder(
                self.embedder, self.spec.chunking, doc.tenant_id, decode_document(bytes(value))
            )
        vectors = embed_chunks(self.embedder, chunks)
        cpu_s = time.process_time() - cpu_started
        return {
            # this batch's CPU seconds, spread over its rows (a column sums to the total)
            "cpu_s": np.full(len(chunks), cpu_s / max(len(chunks), 1)),
            "shard": np.array([shard_for(c.tenant_id, c.chunk_id, self.shards) for c in chunks]),
            "key": np.array([chunk_key(c.tenant_id, c.chunk_id) for c in chunks], dtype=object),
            "value": np.array(
                [encode_chunk(c, v) for c, v in zip(chunks, vectors, strict=True)], dtype=object
            ),
        }


@dataclass(frozen=True)
class RayDataRun:
    """What one Ray Data backfill did: chunk records appended, documents they came from, when
    (seconds from the start) each appended batch of documents was done, and the CPU seconds
    the actors spent chunking and embedding plus the driver's (reading, appending)."""

    chunks: int
    documents: int
    done_at: list[tuple[float, int]]  # (seconds, documents in that output batch)
    actors_cpu_s: float
    driver_cpu_s: float

    @property
    def seconds(self) -> float:
        return self.done_at[-1][0] if self.done_at else 0.0

    def steady_docs_per_s(self) -> float:
        """Documents/s after the first output (the actors' start-up and model loads are
        behind it); 0 when there was only one output batch."""
        if len(self.done_at) < 2:
            return 0.0
        first = self.done_at[0][0]
        return sum(n for _, n in self.done_at[1:]) / (self.seconds - first)


def ray_data_backfill(
    log_: Log, source: DataPlaneTopics, target: DataPlaneTopics, spec: RagIndexSpec, actors: int
) -> RayDataRun:
    """Replay `source.docs` through `actors` embedder actors into `target.chunks` (Ray must be
    initialised)."""
    import ray.data

    started, cpu_started = time.perf_counter(), time.process_time()

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    corpus = live_documents(log_, source, end_offsets(log_, source))
    items = [{"key": k.encode(), "value": encode_document(d)} for k, d in corpus.items()]
    if not items:
        return RayDataRun(0, 0, [], 0.0, 0.0)
    dataset = ray.data.from_items(items, override_num_blocks=-(-len(items) // BATCH_DOCS))
    chunks = dataset.map_batches(
        ChunkAndEmbed,
        fn_constructor_args=(spec.model_dump(mode="json", by_alias=True), target.shards),
        batch_size=BATCH_DOCS,
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=ACTOR_CPUS,
    )
    appended, documents, done_at, actors_cpu_s = 0, 0, [], 0.0
    for batch in chunks.iter_batches(batch_size=None, batch_format="numpy"):  # as produced
        records = [
            (int(s), bytes(k), bytes(v))
            for s, k, v in zip(batch["shard"], batch["key"], batch["value"], strict=True)
        ]
        log_.append(target.chunks, records)
        docs = len(
            {(split_chunk_key(k)[0], doc_of_chunk(split_chunk_key(k)[1])) for _, k, _ in records}
        )
        appended += len(records)
        actors_cpu_s += float(batch["cpu_s"].sum())
        documents += docs
        done_at.append((time.perf_counter() - started, docs))
    driver_cpu_s = time.process_time() - cpu_started
    return RayDataRun(appended, documents, done_at, actors_cpu_s, driver_cpu_s)
