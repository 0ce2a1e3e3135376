"""Fixtures for the embedded BM25 backend: real tantivy indexes on disk."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragindex.lexical.tantivy_index import TantivyIndex

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def tantivy_index(tmp_path: Path) -> Iterator[TantivyIndex]:
    index = TantivyIndex.open(tmp_path / "bm25")
    yield index
    index.close()
