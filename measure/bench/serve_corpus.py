"""`bench serve`'s corpus and queries: real passages (`RealText`: the bundled collections, then
dict-gcide) whose vectors are generated around the real model's vectors of real passages
(`scale_vectors`), loaded through the log and the real ingest worker, and unique keyword
queries cut from the same text (embedded by the real model)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ragindex.config import RagIndexSpec
from ragindex.measure.bench.scale_vectors import Generator
from ragindex.protocols import Embedder, Vectors
from ragindex.records import docs_records
from ragindex.types import Document

TENANT = "bench"


LOAD_BATCH = 2_000
TEXT_WORDS = 60  # of a real passage per document: one chunk (SyntheticPassages counts 2 a word)
QUERY_WORDS = 4
PASSAGES = 100_000  # distinct real passages at most; a larger corpus repeats them


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


class RealText:
    """Real passages as the corpus's text and the source of its queries. BM25 over a few dozen
    synthetic words gives every query term a posting list of ~40 % of the corpus; real text's
    terms are selective (a Zipf vocabulary), so only real text gives the lexical leg (and
    Elasticsearch, its peer) the cost they have on a real corpus."""

    def __init__(self, passages: int) -> None:
        from ragindex.measure.bench.anchors import real_passages

        self.passages = [
            " ".join(p.split()[:TEXT_WORDS]) for p in real_passages(min(passages, PASSAGES))
        ]
        self._words = [re.findall(r"[a-z]{3,}", p.lower()) for p in self.passages]
        self._words = [w for w in self._words if len(w) >= QUERY_WORDS]

    def text(self, n: int) -> str:
        """Document n's text: a real passage (under its record number, so repeats differ)."""
        return f"record {n} {self.passages[n % len(self.passages)]}"

    def query(self, rng: np.random.Generator) -> str:
        """QUERY_WORDS consecutive words of a random passage, as a user types keywords."""
        words = self._words[int(rng.integers(len(self._words)))]
        start = int(rng.integers(len(words) - QUERY_WORDS + 1))
        return " ".join(words[start : start + QUERY_WORDS])


class SyntheticPassages:
    """The real model for queries and identity; for the bulk-loaded passages, vectors that
    behave like the real model's (generated around its vectors of real passages: an HNSW graph
    over near-uniform noise searches several times slower than over real embeddings)."""

    def __init__(self, real: Embedder, generator: Generator, seed: int = 7) -> None:
        if generator.anchors.shape[1] != real.identity.dimension:
            raise ValueError("the generator's anchors are not the embedder's dimension")
        self.real = real
        self.identity = real.identity
        self.max_seq_length = real.max_seq_length
        self._generator = generator
        self._seed = seed

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        self._seed += 1  # each batch its own vectors, the same ones in every run
        return self._generator.generate(len(texts), self._seed)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self.real.embed_queries(texts)

    def count_tokens(self, text: str) -> int:
        return len(text.split()) * 2  # synthetic words are 1-2 word pieces; one chunk each


def load_corpus(
    data_dir: Path, spec: RagIndexSpec, embedder: Embedder, chunks: int, text: RealText
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
                Document("synth", f"d{n}", f"Passage {n}", text.text(n))
                for n in range(start, min(chunks, start + LOAD_BATCH))
            ]
            log.append(topics.docs, docs_records(TENANT, docs, topics.docs_partitions))
            while worker.poll(max_records=LOAD_BATCH):
                pass
    finally:
        log.close()  # the Ingest replica becomes the log's writer


def unique_queries(
    text: RealText, rng: np.random.Generator, count: int, taken: set[str]
) -> list[str]:
    """`count` queries cut from the corpus's text, none seen before (added to `taken`): no
    timed query can be answered from a cache that an earlier one warmed."""
    out: list[str] = []
    while len(out) < count:
        q = text.query(rng)
        if q not in taken:
            taken.add(q)
            out.append(q)
    return out


def fresh_queries(text: RealText, rng: np.random.Generator, taken: set[str]) -> Iterator[str]:
    """An endless stream of unique queries (saturation levels draw from it)."""
    while True:
        yield from unique_queries(text, rng, 64, taken)
