"""The contract of the `DenseIndex` protocol: every dense view inherits it in its tests.

A subclass provides `dense_index`: an empty index of `IDENTITY` whose `upsert` and `delete`
reach its searches the way the implementation's writers reach them. The served views are fed
by the log, not by calls (`ReadOnlyDense` refuses them), so `LogFedDense` wraps one: each
upsert becomes chunk records in a file log's `chunks` topic, in the partition of its shard, as
the ingest worker writes them, and each delete a tombstone; the views then catch up.

Then every test here runs on it: each vector finds itself first, results agree with exact
search (recall@10 at least `MIN_RECALL`, for HNSW), an upsert replaces by chunk id, deleted
chunks are never returned, tenants are isolated even with shared chunk ids, vectors of another
model are refused, an access filter chooses inside the index (k hits when k are allowed), and
bad input is refused. Scores equal the inner product of the stored vectors within
`score_tolerance` (a fixture: `SCORE_TOLERANCE` for float32 storage; an index type that scores
from quantized codes overrides it with its own bound).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from ragindex.errors import IdentityMismatch, InvalidInput
from ragindex.filters import compile_access, parse_filter
from ragindex.hashing import shard_for
from ragindex.log import FileLog
from ragindex.protocols import DenseIndex, Vectors
from ragindex.records import chunk_key, encode_chunk
from ragindex.types import Chunk, ModelIdentity

DIM = 16
IDENTITY = ModelIdentity("contract-model", "0" * 64, DIM, True)
OTHER_IDENTITY = ModelIdentity("other-model", "1" * 64, DIM, True)
MIN_RECALL = 0.9  # recall@10 against exact search; HNSW (M 16, ef 64) reaches 1.0 on these
SCORE_TOLERANCE = 1e-4  # float32 vectors; quantized storage scores within its own bound
SOURCES = ("wiki", "mail", "tickets")


def unit_vectors(n: int, seed: int) -> Vectors:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def chunk_ids(n: int) -> list[str]:
    """`source:doc:0` ids spread over SOURCES (the access filter selects by source)."""
    return [f"{SOURCES[i % len(SOURCES)]}:d{i}:0" for i in range(n)]


def chunk_for(tenant_id: str, chunk_id: str) -> Chunk:
    """The chunk a vector stands for: its source and document from the id, no text."""
    source, doc_id, n = chunk_id.split(":")
    return Chunk(tenant_id, chunk_id, source, doc_id, int(n), "", "", f"h-{chunk_id}")


def exact_top(vectors: Vectors, ids: Sequence[str], query: Vectors, k: int) -> list[str]:
    scores = vectors @ query.reshape(-1)
    return [ids[i] for i in np.argsort(-scores, kind="stable")[:k]]


class LogFedDense:
    """A log-fed dense view (`catch_up`, `search`) behind the DenseIndex write methods: chunk
    records and tombstones appended to `chunks` as the ingest worker appends them."""

    def __init__(
        self, view: DenseIndex, log: FileLog, topic: str, shards: int, catch_up: Callable[[], int]
    ) -> None:
        self.view = view
        self.identity = view.identity
        self.search = view.search
        self.log = log
        self.topic = topic
        self.shards = shards
        self._catch_up = catch_up

    def upsert(self, tenant_id: str, chunk_ids: Sequence[str], vectors: Vectors) -> None:
        self.log.append(
            self.topic,
            [
                (
                    shard_for(tenant_id, cid, self.shards),
                    chunk_key(tenant_id, cid),
                    encode_chunk(chunk_for(tenant_id, cid), vec),
                )
                for cid, vec in zip(chunk_ids, vectors, strict=True)
            ],
        )
        self._catch_up()

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        self.log.append(
            self.topic,
            [
                (shard_for(tenant_id, c, self.shards), chunk_key(tenant_id, c), None)
                for c in chunk_ids
            ],
        )
        self._catch_up()


def chunks_log(root: Path, shards: int, topic: str = "contract.chunks") -> FileLog:
    """A file log under `root` with a `topic` of `shards` partitions (compacted, as served)."""
    log = FileLog(root)
    log.ensure_topic(topic, shards, compacted=True)
    return log


class DenseIndexContract:
    """Subclasses provide `dense_index`: an empty DenseIndex of IDENTITY."""

    N = 300

    @pytest.fixture
    def dense_index(self) -> Iterator[DenseIndex]:
        raise NotImplementedError("the implementation's test class provides an empty index")

    @pytest.fixture
    def score_tolerance(self) -> float:
        """How far a hit's score may be from the inner product of the vectors as given."""
        return SCORE_TOLERANCE

    def _filled(self, index: DenseIndex, tenant: str = "alpha", seed: int = 0) -> Vectors:
        vectors = unit_vectors(self.N, seed)
        index.upsert(tenant, chunk_ids(self.N), vectors)
        return vectors

    def test_each_vector_finds_itself_first(
        self, dense_index: DenseIndex, score_tolerance: float
    ) -> None:
        vectors = self._filled(dense_index)
        ids = chunk_ids(self.N)
        for i in range(0, self.N, 15):
            hits = dense_index.search(vectors[i], 5, "alpha", IDENTITY)
            assert hits[0].chunk_id == ids[i]
            assert hits[0].score == pytest.approx(1.0, abs=score_tolerance)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            assert len(hits) == 5

    def test_results_agree_with_exact_search(self, dense_index: DenseIndex) -> None:
        vectors = self._filled(dense_index)
        ids = chunk_ids(self.N)
        queries = unit_vectors(30, seed=99)
        found = [
            len(
                {h.chunk_id for h in dense_index.search(q, 10, "alpha", IDENTITY)}
                & set(exact_top(vectors, ids, q, 10))
            )
            for q in queries
        ]
        assert sum(found) / (10 * len(queries)) >= MIN_RECALL

    def test_upsert_replaces_by_chunk_id(
        self, dense_index: DenseIndex, score_tolerance: float
    ) -> None:
        self._filled(dense_index)
        target = chunk_ids(self.N)[7]
        new = unit_vectors(1, seed=1234)
        dense_index.upsert("alpha", [target], new)
        hits = dense_index.search(new[0], self.N, "alpha", IDENTITY)
        assert hits[0].chunk_id == target
        assert hits[0].score == pytest.approx(1.0, abs=score_tolerance)
        assert [h.chunk_id for h in hits].count(target) == 1

    def test_deleted_chunks_are_never_returned(self, dense_index: DenseIndex) -> None:
        vectors = self._filled(dense_index)
        ids = chunk_ids(self.N)
        gone = ids[::2]
        dense_index.delete("alpha", [*gone, "wiki:missing:0"])
        for i in range(0, self.N, 25):
            hits = dense_index.search(vectors[i], 50, "alpha", IDENTITY)
            assert not {h.chunk_id for h in hits} & set(gone)
        everything = {h.chunk_id for h in dense_index.search(vectors[1], self.N, "alpha", IDENTITY)}
        live = set(ids[1::2])
        assert everything <= live  # HNSW may miss a few of k = all; exact search finds them all
        assert len(everything) >= MIN_RECALL * len(live)

    def test_tenants_are_isolated_with_shared_chunk_ids(
        self, dense_index: DenseIndex, score_tolerance: float
    ) -> None:
        alpha = self._filled(dense_index, "alpha", seed=0)
        beta = self._filled(dense_index, "beta", seed=1)
        ids = chunk_ids(self.N)
        # beta's vector asked as alpha: hits scored by alpha's vectors, never beta's
        hits = dense_index.search(beta[3], 10, "alpha", IDENTITY)
        by_id = dict(zip(ids, alpha, strict=True))
        assert len(hits) == 10
        for h in hits:
            assert h.score == pytest.approx(float(by_id[h.chunk_id] @ beta[3]), abs=score_tolerance)
        assert dense_index.search(alpha[0], 10, "gamma", IDENTITY) == []
        dense_index.delete("beta", ids[:10])
        assert dense_index.search(alpha[0], 1, "alpha", IDENTITY)[0].chunk_id == ids[0]

    def test_vectors_of_another_model_are_refused(self, dense_index: DenseIndex) -> None:
        vectors = self._filled(dense_index)
        with pytest.raises(IdentityMismatch):
            dense_index.search(vectors[0], 5, "alpha", OTHER_IDENTITY)

    def test_an_access_filter_chooses_inside_the_index(self, dense_index: DenseIndex) -> None:
        vectors = self._filled(dense_index)
        ids = chunk_ids(self.N)
        access = compile_access(parse_filter({"field": "source", "eq": "mail"}), None)
        mail = [i for i, cid in enumerate(ids) if cid.startswith("mail:")]
        found = 0
        queries = unit_vectors(10, seed=7)
        for q in queries:
            hits = dense_index.search(q, 5, "alpha", IDENTITY, access)
            assert len(hits) == 5  # k allowed hits, not what survived a post-filter
            assert all(h.chunk_id.startswith("mail:") for h in hits)
            exact = exact_top(vectors[mail], [ids[i] for i in mail], q, 5)
            found += len({h.chunk_id for h in hits} & set(exact))
        assert found / (5 * len(queries)) >= MIN_RECALL

    @pytest.mark.parametrize(
        ("query", "top_k", "tenant"),
        [
            ("vector", 0, "alpha"),
            ("vector", True, "alpha"),
            ("vector", 5, "Not A Tenant"),
            ("short", 5, "alpha"),
            ("text", 5, "alpha"),
        ],
    )
    def test_bad_search_is_refused(
        self, dense_index: DenseIndex, query: str, top_k: int, tenant: str
    ) -> None:
        vectors = self._filled(dense_index)
        q = {"vector": vectors[0], "short": vectors[0][:4], "text": "a query"}[query]
        with pytest.raises(InvalidInput):
            dense_index.search(q, top_k, tenant, IDENTITY)
