"""ACLs and filters inside the BM25 leg, on tantivy and on Elasticsearch (one contract)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragindex.lexical.elasticsearch_index import ElasticsearchIndex
from ragindex.measure.servers.elasticsearch import EsServer

from .filter_contract import FilteredLexicalContract, random_corpus
from .layouts import LAYOUTS, EmbeddedBm25


class TestTantivyFilters(FilteredLexicalContract):
    """Both embedded layouts: one shared index, and an index per tenant."""

    @pytest.fixture(scope="class", params=sorted(LAYOUTS))
    @classmethod
    def filtered_index(
        cls, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[EmbeddedBm25]:
        index = LAYOUTS[request.param](Path(tmp_path_factory.mktemp("filters")) / "bm25")
        index.upsert(random_corpus())
        yield index
        index.close()


@pytest.mark.elasticsearch
class TestElasticsearchFilters(FilteredLexicalContract):
    @pytest.fixture(scope="class")
    @classmethod
    def filtered_index(cls, es_server: EsServer) -> Iterator[ElasticsearchIndex]:
        index = ElasticsearchIndex.open(
            es_server.url, f"f_{uuid.uuid4().hex[:12]}", timeout_s=30.0, refresh_interval_s=0.2
        )
        index.upsert(random_corpus())
        yield index
        index.drop()
        index.close()
