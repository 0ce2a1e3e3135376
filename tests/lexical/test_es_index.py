"""The Elasticsearch BM25 backend against a real server: the LexicalIndex contract, then the
alias generations, the mapping, bulk failures and timeouts."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.lexical import ElasticsearchIndex
from ragindex.lexical.elasticsearch_index import BulkWriteError
from ragindex.measure.servers import EsServer
from ragindex.netutil import free_port
from ragindex.testing import LexicalIndexContract, random_corpus
from ragindex.types import Chunk, ScoredId

pytestmark = pytest.mark.elasticsearch
MakeChunk = Callable[..., Chunk]


def ids(hits: list[ScoredId]) -> list[str]:
    return [h.chunk_id for h in hits]


def test_mapping_and_bm25_settings(es_index: ElasticsearchIndex) -> None:
    es = es_index._client
    name = es_index.index_name()
    settings = es.indices.get_settings(index=name)[name]["settings"]["index"]
    assert settings["similarity"]["ragindex_bm25"] == {"type": "BM25", "k1": "1.2", "b": "0.75"}
    # A delete's version is kept as long as the log keeps its tombstone (a day by default).
    assert settings["gc_deletes"] == "86400s"
    props = es.indices.get_mapping(index=name)[name]["mappings"]["properties"]
    for field in ("title", "body"):
        assert props[field]["analyzer"] == "standard"
        assert props[field]["similarity"] == "ragindex_bm25"
    assert props["tenant_id"]["type"] == "keyword"


def test_bulk_item_failures_are_reported(
    es_index: ElasticsearchIndex, make_chunk: MakeChunk
) -> None:
    es_index.upsert([make_chunk("t1", "s:a:0", "first")])
    es = es_index._client
    es.indices.put_settings(index=es_index.index_name(), settings={"index.blocks.write": True})
    try:
        with pytest.raises(BulkWriteError) as info:
            es_index.upsert([make_chunk("t1", "s:a:1", "second"), make_chunk("t1", "s:a:2", "x")])
        assert set(info.value.failures) == {"s:a:1", "s:a:2"}
        assert "block" in str(info.value)
    finally:
        es.indices.put_settings(index=es_index.index_name(), settings={"index.blocks.write": False})
    assert es_index.count("t1") == 1


def test_alias_swap_never_fails_a_search(
    es_server: EsServer, new_alias: Callable[[], str], make_chunk: MakeChunk
) -> None:
    alias = new_alias()
    live = ElasticsearchIndex.open(es_server.url, alias, refresh_interval_s=0.2)
    docs = [make_chunk("t1", f"s:d:{i}", f"nozzle flow case {i}") for i in range(50)]
    live.upsert(docs)
    failures: list[str] = []
    searches = 0
    stop = threading.Event()

    def searcher() -> None:
        nonlocal searches
        reader = ElasticsearchIndex(es_server.url, alias, timeout_s=5.0)
        while not stop.is_set():
            try:
                if not reader.search("nozzle flow", 10, "t1"):
                    failures.append("empty result")
            except Exception as exc:  # every failure is reported, not raised in the thread
                failures.append(repr(exc))
            searches += 1
        reader.close()

    thread = threading.Thread(target=searcher)
    thread.start()
    try:
        for generation in ("2", "3"):
            nxt = ElasticsearchIndex.open(es_server.url, alias, generation=generation)
            nxt.upsert([*docs, make_chunk("t1", f"s:gen:{generation}", "nozzle generation")])
            live.swap_alias(generation)
            nxt.close()
            time.sleep(0.3)
    finally:
        stop.set()
        thread.join(30)
    try:
        assert failures == []
        assert searches > 5
        assert live.generation == "3"
        assert live._alias_targets() == [f"{alias}-3"]
        # Older generations are kept for rollback until retired; the serving one cannot be.
        assert live._client.indices.exists(index=f"{alias}-1")
        assert "s:gen:3" in ids(live.search("generation", 5, "t1"))
        live.drop_generation("1")
        assert not live._client.indices.exists(index=f"{alias}-1")
        with pytest.raises(InvalidInput, match="cannot be dropped"):
            live.drop_generation("3")
        live.swap_alias("2")  # a rollback: one call back to the retained index
        assert live._alias_targets() == [f"{alias}-2"]
        assert "s:gen:3" not in ids(live.search("generation", 5, "t1"))
    finally:
        live.drop()
        live.close()


def test_swap_to_missing_generation_changes_nothing(es_index: ElasticsearchIndex) -> None:
    with pytest.raises(InvalidInput, match="does not exist"):
        es_index.swap_alias("99")
    assert es_index._alias_targets() == [es_index.index_name()]


@pytest.mark.parametrize(
    ("alias", "generation"), [("Bad", "1"), ("has-dash", "1"), ("ok", "a b"), ("ok", "")]
)
def test_bad_names_are_rejected(alias: str, generation: str) -> None:
    with pytest.raises(InvalidInput):
        ElasticsearchIndex("http://127.0.0.1:9", alias, generation=generation)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A socket that accepts connections (kernel backlog) and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock.getsockname()[1]
    sock.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["closed port", "silent socket"])
def test_unreachable_server_fails_fast_and_clearly(
    kind: str, silent_port: int, make_chunk: MakeChunk
) -> None:
    port = free_port() if kind == "closed port" else silent_port
    timeout_s = 0.5
    index = ElasticsearchIndex(f"http://127.0.0.1:{port}", "down", timeout_s=timeout_s)
    calls: list[Callable[[], object]] = [
        lambda: index.search("wing", 5, "t1"),
        lambda: index.count("t1"),
        lambda: index.upsert([make_chunk("t1", "s:a:0", "x")]),
    ]
    for call in calls:
        start = time.monotonic()
        with pytest.raises(BackendUnavailable, match="Elasticsearch did not answer"):
            call()
        # Bounded by the timeout (writes add the refresh interval), never a hang.
        assert time.monotonic() - start < 2 * (timeout_s + index.refresh_interval_s) + 1
    index.close()


class TestElasticsearchContract(LexicalIndexContract):
    @pytest.fixture
    def lexical_index(self, es_index: ElasticsearchIndex) -> ElasticsearchIndex:
        return es_index

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
