"""A tenant partition: exact/HNSW search, replacement, tombstones, the flat->HNSW switch."""

from __future__ import annotations

import numpy as np
import pytest

from ragindex.errors import InvalidInput
from ragindex.shards import TenantPartition

DIM = 16


def exact_top(vectors: np.ndarray, ids: list[str], query: np.ndarray, k: int) -> list[str]:
    order = np.argsort(-(vectors @ query), kind="stable")[:k]
    return [ids[i] for i in order]


def test_flat_search_is_exact_and_sorted(hnsw, vecs):
    part = TenantPartition(DIM, hnsw, exact_threshold=1000)
    x = vecs(200)
    ids = [f"c{i}" for i in range(200)]
    part.upsert(ids, x)
    q = vecs(1, seed=5)[0]
    hits = part.search(q, 10)
    assert part.kind == "flat"
    assert [h.chunk_id for h in hits] == exact_top(x, ids, q, 10)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].score == pytest.approx(float(x[ids.index(hits[0].chunk_id)] @ q), abs=1e-5)


def test_vectors_are_normalised_without_touching_the_callers_array(hnsw, vecs):
    part = TenantPartition(DIM, hnsw, exact_threshold=10)
    raw = vecs(3) * 7.0
    before = raw.copy()
    part.upsert(["a", "b", "c"], raw)
    np.testing.assert_array_equal(raw, before)
    assert part.search(raw[1], 1)[0].score == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("threshold", [1000, 0], ids=["flat", "hnsw"])
def test_upsert_replaces_an_existing_chunk(hnsw, vecs, threshold):
    part = TenantPartition(DIM, hnsw, exact_threshold=threshold)
    x = vecs(50)
    part.upsert([f"c{i}" for i in range(50)], x)
    part.upsert(["c7"], x[3:4])  # c7 now points where c3 does
    assert len(part) == 50
    hits = part.search(x[7], 50)
    assert [h.chunk_id for h in hits].count("c7") == 1
    assert hits[0].chunk_id != "c7"  # its old vector is gone
    near_c3 = {h.chunk_id for h in part.search(x[3], 2)}
    assert near_c3 == {"c3", "c7"}


@pytest.mark.parametrize("threshold", [1000, 0], ids=["flat", "hnsw"])
def test_deleted_chunks_are_never_returned(hnsw, vecs, threshold):
    part = TenantPartition(DIM, hnsw, exact_threshold=threshold)
    x = vecs(100)
    part.upsert([f"c{i}" for i in range(100)], x)
    deleted = {f"c{i}" for i in range(0, 100, 3)}
    assert part.delete([*sorted(deleted), "never-existed"]) == len(deleted)
    assert len(part) == 100 - len(deleted)
    for i in range(0, 100, 3):
        found = {h.chunk_id for h in part.search(x[i], 100)}
        assert not found & deleted
        assert len(found) >= (len(part) if threshold else 0.9 * len(part))  # HNSW: approximate
    if threshold == 0:
        assert part.tombstones == len(deleted)
        part.compact()
        assert part.tombstones == 0 and len(part) == 100 - len(deleted)
        found = {h.chunk_id for h in part.search(x[1], 100)}
        assert not found & deleted and len(found) >= 0.9 * len(part)


def test_flat_to_hnsw_switch_keeps_results(hnsw, vecs):
    part = TenantPartition(DIM, hnsw, exact_threshold=300)
    x = vecs(400)
    ids = [f"c{i}" for i in range(400)]
    part.upsert(ids[:300], x[:300])
    part.delete(["c5"])
    queries = vecs(20, seed=9)
    before = [[h.chunk_id for h in part.search(q, 10)] for q in queries]
    assert part.kind == "flat"
    part.upsert(ids[300:], x[300:])  # crosses the threshold: rebuilt as HNSW
    assert part.kind == "hnsw"
    assert len(part) == 399
    old_live = [i for i in range(300) if i != 5]
    live = [*old_live, *range(300, 400)]
    for q, old in zip(queries, before, strict=True):
        assert old == exact_top(x[old_live], [ids[i] for i in old_live], q, 10)
        got = [h.chunk_id for h in part.search(q, 10)]
        assert "c5" not in got
        assert len(set(got) & set(exact_top(x[live], [ids[i] for i in live], q, 10))) >= 9
    part.upsert(["c0"], x[1:2])  # an upsert in HNSW mode replaces too
    assert [h.chunk_id for h in part.search(x[0], 400)].count("c0") == 1


def test_bad_input_is_rejected_and_changes_nothing(hnsw, vecs):
    part = TenantPartition(DIM, hnsw, exact_threshold=1000)
    part.upsert(["a", "b"], vecs(2))
    nan = vecs(2)
    nan[1, 3] = np.nan
    cases = [
        (["x"], vecs(1, dim=DIM + 1), "shape"),
        (["x", "y"], nan, "NaN"),
        (["x"], np.zeros((1, DIM)), "all-zero"),
        (["x", "y"], vecs(1), "2 chunk ids for 1 vectors"),
        (["x", "x"], vecs(2), "duplicates"),
        ([""], vecs(1), "malformed"),
        ("ab", vecs(2), "sequence of strings"),
        (["x"], [["not", "numbers"] * (DIM // 2)], "numeric"),
    ]
    for ids, x, message in cases:
        with pytest.raises(InvalidInput, match=message):
            part.upsert(ids, x)
    assert sorted(part.chunk_ids()) == ["a", "b"]
    for top_k in (0, -1, True, 1.5, 10**9):
        with pytest.raises(InvalidInput, match="top_k"):
            part.search(vecs(1)[0], top_k)
    with pytest.raises(InvalidInput, match="query_vector"):
        part.search(vecs(2), 1)


def test_snapshot_bytes_round_trip(hnsw, vecs):
    part = TenantPartition(DIM, hnsw, exact_threshold=0)
    x = vecs(60)
    part.upsert([f"c{i}" for i in range(60)], x)
    part.delete(["c1", "c2"])
    copy = TenantPartition.from_files(*part.to_files(), DIM, hnsw, 0)
    assert copy.kind == "hnsw" and copy.tombstones == 2 and len(copy) == 58
    for q in vecs(5, seed=3):
        assert copy.search(q, 10) == part.search(q, 10)
    copy.upsert(["new"], x[1:2])  # internal ids continue after the saved ones
    assert copy.search(x[1], 1)[0].chunk_id == "new"


@pytest.mark.parametrize("share", [0.005, 0.05, 0.3, 0.7, 1.0])
def test_allowed_ids_are_searched_inside_the_index_at_any_selectivity(hnsw, vecs, share):
    """Exact over few allowed ids, HNSW with a selector over many: only allowed, live chunks
    come back, and the top-k of the allowed ones is found (deleted ones never are)."""
    part = TenantPartition(DIM, hnsw, exact_threshold=100)
    x = vecs(2000)
    ids = [f"c{i}" for i in range(2000)]
    part.upsert(ids, x)
    assert part.kind == "hnsw"
    deleted = set(ids[::7])
    part.delete(sorted(deleted))
    rng = np.random.default_rng(1)
    allowed = {c for c in ids if rng.random() < share}
    live = [i for i, c in enumerate(ids) if c in allowed and c not in deleted]
    recalls = []
    for seed in range(20):
        q = vecs(1, seed=100 + seed)[0]
        found = [h.chunk_id for h in part.search(q, 10, allowed)]
        assert set(found) <= allowed - deleted
        truth = exact_top(x[live], [ids[i] for i in live], q, 10)
        recalls.append(len(set(found) & set(truth)) / len(truth))
    assert np.mean(recalls) >= 0.98
    assert part.search(vecs(1, seed=9)[0], 10, set()) == []


def _clustered_with_an_outlier(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """3,000 vectors in four tight clusters, one vector far from all of them, and a query near
    that one."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, DIM))
    x = (centres[rng.integers(0, 4, 3000)] + 0.3 * rng.standard_normal((3000, DIM))).astype(
        np.float32
    )
    outlier = rng.standard_normal((1, DIM)).astype(np.float32)
    query = outlier[0] + 0.2 * rng.standard_normal(DIM).astype(np.float32)
    unit = [v / np.linalg.norm(v, axis=-1, keepdims=True) for v in (x, outlier, query)]
    return unit[0], unit[1], unit[2]


@pytest.mark.parametrize("kind", ["hnsw", "hnsw_sq8"])
def test_a_vector_unlike_the_graph_is_found_as_soon_as_it_is_written(kind: str) -> None:
    """A chunk on a new topic gets HNSW links to far neighbours and a query near it descends
    into the corpus's nearest cluster: the graph alone misses it (checked first, so the test
    can fail), the partition's search of its newest vectors finds it, through a snapshot too;
    deleted, it is gone."""
    from ragindex.config import DenseIndexSpec, HnswSpec

    x, outlier, query = _clustered_with_an_outlier(seed=6)
    spec = DenseIndexSpec(type=kind, train_min=1000)
    part = TenantPartition(DIM, HnswSpec(m=8, ef_construction=40, ef_search=16), 0, spec)
    part.upsert([f"c{i}" for i in range(len(x))], x)
    part.upsert(["new"], outlier)
    assert part.kind == kind
    _, labels = part._index.search(query[None, :], 10)
    assert part._internal["new"] not in labels[0]  # the graph alone misses it
    hits = part.search(query, 10)
    assert hits[0].chunk_id == "new" and len(hits) == 10
    assert hits[0].score == pytest.approx(float(outlier[0] @ query), abs=2e-2)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert part.search(query, 10, allowed=frozenset({"new", "c1", "c2"}))[0].chunk_id == "new"
    loaded = TenantPartition.from_files(*part.to_files(), DIM, part.hnsw, 0, spec)
    assert loaded.search(query, 10)[0].chunk_id == "new"
    part.delete(["new"])
    assert "new" not in {h.chunk_id for h in part.search(query, 10)}


@pytest.mark.parametrize("kind", ["hnsw", "hnsw_sq8"])
def test_recent_exact_0_searches_the_graph_alone(kind: str) -> None:
    """`hnsw.recentExact: 0` searches no newest vectors: the graph's miss stands, in a
    partition written so and in one loaded so from a snapshot that kept them (the gate
    measures the graph so)."""
    from ragindex.config import DenseIndexSpec, HnswSpec

    x, outlier, query = _clustered_with_an_outlier(seed=6)
    spec = DenseIndexSpec(type=kind, train_min=1000)
    ringed = HnswSpec(m=8, ef_construction=40, ef_search=16)
    graph_alone = ringed.model_copy(update={"recent_exact": 0})
    parts = {}
    for hnsw in (ringed, graph_alone):
        parts[hnsw] = part = TenantPartition(DIM, hnsw, 0, spec)
        part.upsert([f"c{i}" for i in range(len(x))], x)
        part.upsert(["new"], outlier)
        assert ("new" in {h.chunk_id for h in part.search(query, 10)}) == (hnsw is ringed)
    loaded = TenantPartition.from_files(*parts[ringed].to_files(), DIM, graph_alone, 0, spec)
    assert "new" not in {h.chunk_id for h in loaded.search(query, 10)}
