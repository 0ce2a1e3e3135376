"""The operator's read-alias switch at promotion, against the real Elasticsearch: one index per
generation, and one `_aliases` call that moves the alias from the old to the new."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from ragindex.config import RagIndexSpec
from ragindex.generations import index_generation, lexical_index_name
from ragindex.lexical import ElasticsearchIndex
from ragindex.measure.servers import EsServer
from ragindex.operator import switch_read_alias
from ragindex.types import Chunk

pytestmark = pytest.mark.elasticsearch

MakeChunk = Callable[..., Chunk]


def test_each_generation_has_its_own_index_and_promotion_moves_the_alias_in_one_call(
    es_server: EsServer, new_alias: Callable[[], str], make_chunk: MakeChunk
) -> None:
    alias = new_alias()
    old, resharded = (
        index_generation(RagIndexSpec.model_validate({"dense": {"shards": n}})) for n in (2, 3)
    )
    assert old != resharded  # a reshard is a new generation, so a new index
    serving = ElasticsearchIndex.open(es_server.url, alias, generation=old, refresh_interval_s=0.2)
    building = ElasticsearchIndex.open(
        es_server.url, alias, generation=resharded, refresh_interval_s=0.2
    )
    try:
        serving.upsert([make_chunk("t1", "s:a:0", "nozzle flow old")])
        building.upsert([make_chunk("t1", "s:a:0", "nozzle flow new")])
        assert serving.index_name() == lexical_index_name(alias, old)
        assert building.index_name() == lexical_index_name(alias, resharded)
        # Building a generation does not move the alias: searches read the old index.
        assert serving._alias_targets() == [lexical_index_name(alias, old)]
        assert "old" in serving._run_terms({"nozzle": 1.0}, 5, "t1", True)[0][1]

        actions = asyncio.run(
            switch_read_alias(es_server.url, alias, lexical_index_name(alias, resharded))
        )
        assert actions == [
            {"remove": {"index": lexical_index_name(alias, old), "alias": alias}},
            {"add": {"index": lexical_index_name(alias, resharded), "alias": alias}},
        ]
        assert serving._alias_targets() == [lexical_index_name(alias, resharded)]
        assert "new" in serving._run_terms({"nozzle": 1.0}, 5, "t1", True)[0][1]
        # The retained index is still there for a rollback; switching again is idempotent.
        assert serving._client.indices.exists(index=lexical_index_name(alias, old))
        asyncio.run(switch_read_alias(es_server.url, alias, lexical_index_name(alias, resharded)))
        assert serving._alias_targets() == [lexical_index_name(alias, resharded)]
        # A switch to an index that does not exist fails and leaves the alias alone.
        with pytest.raises(httpx.HTTPStatusError):
            asyncio.run(switch_read_alias(es_server.url, alias, f"{alias}-missing"))
        assert serving._alias_targets() == [lexical_index_name(alias, resharded)]
    finally:
        serving.drop()
        serving.close()
        building.close()
