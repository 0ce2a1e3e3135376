"""A real Elasticsearch for the whole session (started from the cached integ-test distribution).

The server is started once (about 20 s) by `ragindex.measure.servers.elasticsearch`, so
benchmarks use the same harness; each test gets its own alias and drops it afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from ragindex.lexical import ElasticsearchIndex
from ragindex.measure.servers import EsServer

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def new_alias() -> Callable[[], str]:
    """Fresh alias names, unique across the session."""
    return lambda: f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def es_index(es_server: EsServer, new_alias: Callable[[], str]) -> Iterator[ElasticsearchIndex]:
    index = ElasticsearchIndex.open(es_server.url, new_alias(), refresh_interval_s=0.2)
    yield index
    index.drop()
    index.close()
