"""Fixtures for the embedded BM25 backend: real tantivy indexes on disk, in both layouts
(`lexical.tenantIsolation`: one shared index, or an index per tenant); and an Elasticsearch
index on the session's server (tests/conftest.py), under an alias of its own dropped afterwards."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ragindex.lexical import ElasticsearchIndex
from ragindex.measure.servers import EsServer

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


@pytest.fixture
def es_index(es_server: EsServer, new_alias: Callable[[], str]) -> Iterator[ElasticsearchIndex]:
    index = ElasticsearchIndex.open(es_server.url, new_alias(), refresh_interval_s=0.2)
    yield index
    index.drop()
    index.close()
