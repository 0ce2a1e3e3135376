"""The filtered-search benchmark runner: shape, recall and input checks on a small collection."""

from __future__ import annotations

import pytest

from ragindex.config import DenseSpec, HnswSpec
from ragindex.errors import InvalidInput
from ragindex.measure.bench.filtered import (
    recall_at_k,
    run_access_bench,
    run_filtered_bench,
    tenant_sizes,
)


def test_small_run_has_the_documented_shape_and_high_recall():
    dense = DenseSpec(
        replicas=1,
        shards=2,
        hnsw=HnswSpec(m=16, ef_construction=80, ef_search=64),
        exact_threshold=500,
    )
    result = run_filtered_bench(vectors=4000, dim=32, shares=(0.01, 0.5), queries=30, dense=dense)
    assert list(result) == ["0.01", "0.5"]
    assert result["0.01"]["vectors"] == 40 and result["0.01"]["search"] == "flat"
    assert result["0.5"]["vectors"] == 2000 and result["0.5"]["search"] == "hnsw"
    for row in result.values():
        assert row["recall@10"] >= 0.95
        assert row["samples"] == 30 and row["p50_ms"] > 0  # the warm-up queries are not timed


def test_inputs_are_checked():
    assert tenant_sizes(100_000, (0.001, 0.5)) == {"0.001": 100, "0.5": 50_000}
    for shares in [(), (0.6, 0.6), (0.0,), (1.5,), (0.1, 0.1)]:
        with pytest.raises(InvalidInput, match="shares"):
            tenant_sizes(1000, shares)
    with pytest.raises(InvalidInput, match="queries"):
        run_filtered_bench(vectors=100, queries=0)
    assert recall_at_k(["a", "b", "x"], ["a", "b", "c"]) == pytest.approx(2 / 3)


@pytest.mark.parametrize("kind", ["acl", "metadata"])
def test_access_filters_keep_recall_at_every_selectivity(kind: str) -> None:
    """One tenant above the exact threshold: selective filters go exact, broad ones HNSW with
    a selector and a raised efSearch (4,000 vectors a shard: half of them cost more exact than
    at ef 64), one allowing everything searches as none; recall holds at every share."""
    dense = DenseSpec(shards=2, hnsw=HnswSpec(m=16, ef_construction=80, ef_search=32),
                      exact_threshold=300)  # fmt: skip
    result = run_access_bench(
        vectors=8000, dim=32, shares=(0.001, 0.01, 0.1, 0.5, 1.0), queries=40, dense=dense,
        kind=kind,
    )  # fmt: skip
    assert list(result) == ["unfiltered", "0.001", "0.01", "0.1", "0.5", "1.0"]
    assert result["0.001"]["plan"] == "exact" and result["0.1"]["plan"] == "exact"
    assert result["0.5"]["plan"] == "hnsw ef=64" and result["1.0"]["plan"] == "unfiltered"
    assert result["unfiltered"]["plan"] == "hnsw"
    for row in result.values():
        assert row["recall@10"] >= 0.98, result
