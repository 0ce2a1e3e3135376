"""`bench serve`'s corpus and queries: synthetic passages (real-model queries, clustered
synthetic vectors) loaded through the log and the real ingest worker, and unique queries."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ragindex.config import RagIndexSpec
from ragindex.protocols import Embedder, Vectors
from ragindex.records import docs_records
from ragindex.types import Document

if TYPE_CHECKING:  # Ray is imported only when the benchmark runs
    pass


TENANT = "bench"


LOAD_BATCH = 2_000


_WORDS_TEXT = (
    "wing flow shock boundary layer pressure heat transfer nozzle supersonic laminar turbulent"
    " blade rotor thermal stress panel buckling cylinder plate vortex wake drag lift mach"
    " reynolds number jet engine combustion fuel cooling radiation surface skin friction"
    " separation slender body cone hypersonic inlet diffuser compressor turbine vibration"
    " flutter damping load fatigue crack structure beam shell orbit satellite reentry ablation"
)


WORDS = _WORDS_TEXT.split()


def synthetic_text(rng: np.random.Generator, n: int, words: int = 40) -> str:
    picked = rng.choice(len(WORDS), size=words)
    return f"record {n} " + " ".join(WORDS[i] for i in picked)


def clustered_unit_vectors(
    rng: np.random.Generator, count: int, dim: int, centers: np.ndarray
) -> Vectors:
    """Unit vectors around random centres: closer to real embeddings than uniform noise."""
    which = rng.integers(0, len(centers), size=count)
    vecs = centers[which] + 0.35 * rng.standard_normal((count, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return np.ascontiguousarray(vecs, dtype=np.float32)


class SyntheticPassages:
    """The real model for queries and identity; synthetic vectors for the bulk-loaded passages."""

    def __init__(self, real: Embedder, seed: int = 7) -> None:
        self.real = real
        self.identity = real.identity
        self.max_seq_length = real.max_seq_length
        self._rng = np.random.default_rng(seed)
        dim = real.identity.dimension
        centers = self._rng.standard_normal((64, dim)).astype(np.float32)
        self._centers = centers / np.linalg.norm(centers, axis=1, keepdims=True)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return clustered_unit_vectors(self._rng, len(texts), self.identity.dimension, self._centers)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self.real.embed_queries(texts)

    def count_tokens(self, text: str) -> int:
        return len(text.split()) * 2  # synthetic words are 1-2 word pieces; one chunk each


def load_corpus(
    data_dir: Path, spec: RagIndexSpec, embedder: Embedder, chunks: int, rng: np.random.Generator
) -> None:
    """Append the corpus to `docs` and run the ingest worker over it, in this process."""
    from ragindex.app import APP_NAME
    from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, ensure_topics, open_log
    from ragindex.ingest import IngestWorker
    from ragindex.topics import plane_topics

    topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
    log = open_log(data_dir)
    try:
        ensure_topics(log, topics)
        worker = IngestWorker(log, topics, embedder, spec.chunking, range(topics.docs_partitions))
        for start in range(0, chunks, LOAD_BATCH):
            docs = [
                Document("synth", f"d{n}", f"Synthetic {n}", synthetic_text(rng, n))
                for n in range(start, min(chunks, start + LOAD_BATCH))
            ]
            log.append(topics.docs, docs_records(TENANT, docs, topics.docs_partitions))
            while worker.poll(max_records=LOAD_BATCH):
                pass
    finally:
        log.close()  # the Ingest replica becomes the log's writer


def unique_queries(rng: np.random.Generator, count: int, taken: set[str]) -> list[str]:
    """`count` queries of 5 vocabulary words, none seen before (added to `taken`): no timed
    query can be answered from a cache that an earlier one warmed."""
    out: list[str] = []
    while len(out) < count:
        q = " ".join(rng.choice(WORDS, size=5, replace=False))
        if q not in taken:
            taken.add(q)
            out.append(q)
    return out


def fresh_queries(rng: np.random.Generator, taken: set[str]) -> Iterator[str]:
    """An endless stream of unique queries (saturation levels draw from it)."""
    while True:
        yield from unique_queries(rng, 64, taken)
