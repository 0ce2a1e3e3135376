"""Fixtures for the embedded BM25 backend: real tantivy indexes on disk, the Cranfield corpus."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ragindex.lexical.bench import Cranfield, load_cranfield
from ragindex.lexical.tantivy_index import TantivyIndex
from ragindex.types import Chunk

os.environ.setdefault("OMP_NUM_THREADS", "1")
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
def cranfield() -> Cranfield:
    if not CRANFIELD_DIR.exists():
        pytest.skip(f"Cranfield data not found at {CRANFIELD_DIR}")
    return load_cranfield(CRANFIELD_DIR)
