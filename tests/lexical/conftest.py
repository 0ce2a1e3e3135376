"""Fixtures for the embedded BM25 backend: real tantivy indexes on disk, the Cranfield corpus."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ragindex.evals.collections import Collection, load_cranfield
from ragindex.evals.metrics import ndcg_at_k
from ragindex.lexical.tantivy_index import TantivyIndex
from ragindex.protocols import LexicalIndex
from ragindex.types import Chunk

os.environ.setdefault("OMP_NUM_THREADS", "1")
BENCH_TENANT = "bench"
CRANFIELD_DIR = Path(
    os.environ.get("RAGINDEX_CRANFIELD")
    or Path(__file__).resolve().parents[2].parent / "shared" / "data" / "cranfield"
)


def _make_chunk(tenant: str, chunk_id: str, text: str, title: str = "") -> Chunk:
    source, doc_id = ([*chunk_id.split(":"), "d", "0"])[:2]
    return Chunk(tenant, chunk_id, source, doc_id, 0, title, text, "hash")


@pytest.fixture(scope="session")
def make_chunk() -> Callable[..., Chunk]:
    """Chunk factory: make_chunk(tenant, chunk_id, text, title="")."""
    return _make_chunk


@pytest.fixture
def tantivy_index(tmp_path: Path) -> Iterator[TantivyIndex]:
    index = TantivyIndex.open(tmp_path / "bm25")
    yield index
    index.close()


@pytest.fixture(scope="session")
def cranfield() -> Collection:
    if not CRANFIELD_DIR.exists():
        pytest.skip(f"Cranfield data not found at {CRANFIELD_DIR}")
    return load_cranfield(CRANFIELD_DIR)


@pytest.fixture(scope="session")
def cranfield_chunks(cranfield: Collection) -> list[Chunk]:
    """One chunk per Cranfield document (chunk id = doc id; the title where there is no text)."""
    return [
        Chunk(BENCH_TENANT, d.doc_id, "bench", d.doc_id, 0, "", d.text or d.title, "")
        for d in cranfield.corpus.values()
    ]


@pytest.fixture(scope="session")
def mean_ndcg(cranfield: Collection) -> Callable[[LexicalIndex], float]:
    """Mean nDCG@10 over the judged queries of a BM25 index holding `cranfield_chunks`."""

    def mean(index: LexicalIndex) -> float:
        scores = [
            ndcg_at_k(
                [h.chunk_id for h in index.search(cranfield.queries[q].text, 10, BENCH_TENANT)],
                cranfield.qrels[q],
                10,
            )
            for q in cranfield.judged_queries()
        ]
        return sum(scores) / len(scores)

    return mean
