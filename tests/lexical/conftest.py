"""Fixtures for the embedded BM25 backend: real tantivy indexes on disk, in both layouts
(`lexical.tenantIsolation`: one shared index, or an index per tenant)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .layouts import LAYOUTS, EmbeddedBm25, OpenBm25

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(params=sorted(LAYOUTS))
def open_bm25(request: pytest.FixtureRequest) -> OpenBm25:
    """Opens an embedded BM25 index at a path, in one layout (the test runs in each)."""
    return LAYOUTS[request.param]


@pytest.fixture
def tantivy_index(open_bm25: OpenBm25, tmp_path: Path) -> Iterator[EmbeddedBm25]:
    index = open_bm25(tmp_path / "bm25")
    yield index
    index.close()
