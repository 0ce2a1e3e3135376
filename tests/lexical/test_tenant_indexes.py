"""An index per tenant (`lexical.tenantIsolation: index-per-tenant`): a tenant's BM25 scores
do not depend on what other tenants hold; writers stay bounded. (Everything the shared layout
guarantees is checked on this one too: test_tantivy_index.py and test_filters.py run both.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ragindex.errors import BackendUnavailable
from ragindex.lexical import TantivyIndex, TenantIndexes
from ragindex.lexical.tenant_indexes import MAX_OPEN_WRITERS
from ragindex.types import Chunk

MakeChunk = Callable[..., Chunk]
OWN = [
    "transonic flow over a swept wing",
    "wing flutter at high speed",
    "boundary layer on a flat plate",
]


def _scores(index: TantivyIndex | TenantIndexes, query: str) -> dict[str, float]:
    return {h.chunk_id: h.score for h in index.search(query, 10, "alpha")}


@pytest.mark.parametrize("layout", ["shared", "index-per-tenant"])
def test_other_tenants_data_moves_scores_only_in_a_shared_index(
    layout: str, tmp_path: Path, make_chunk: MakeChunk
) -> None:
    """What a tenant could learn from a shared index: its own scores move when another tenant
    writes a term it has (IDF and average length are shared); per tenant they stay put."""
    opener = TantivyIndex.open if layout == "shared" else TenantIndexes.open
    index = opener(tmp_path / "bm25")
    try:
        index.upsert([make_chunk("alpha", f"s:a:{i}", text) for i, text in enumerate(OWN)])
        before = _scores(index, "wing")
        index.upsert([make_chunk("beta", f"s:b:{i}", f"wing wing report {i}") for i in range(40)])
        after = _scores(index, "wing")
        assert set(before) == set(after) == {"s:a:0", "s:a:1"}  # never beta's chunks
        if layout == "shared":
            assert after != pytest.approx(before)
        else:
            assert after == before
    finally:
        index.close()


def test_scores_equal_a_shared_index_holding_that_tenant_alone(
    tmp_path: Path, make_chunk: MakeChunk
) -> None:
    alone = TantivyIndex.open(tmp_path / "alone")
    per_tenant = TenantIndexes.open(tmp_path / "per-tenant")
    try:
        own = [make_chunk("alpha", f"s:a:{i}", text) for i, text in enumerate(OWN)]
        alone.upsert(own)
        per_tenant.upsert([*own, make_chunk("beta", "s:b:0", "wing " * 30)])
        assert _scores(per_tenant, "swept wing") == pytest.approx(_scores(alone, "swept wing"))
    finally:
        alone.close()
        per_tenant.close()


def test_writers_are_bounded_and_reopened(tmp_path: Path, make_chunk: MakeChunk) -> None:
    """More tenants than open writers: the least recently written is closed and reopened when
    written again; nothing is lost and searches never see a closed handle."""
    index = TenantIndexes.open(tmp_path / "bm25")
    tenants = [f"t{i}" for i in range(MAX_OPEN_WRITERS + 3)]
    try:
        for round_ in range(2):
            for tenant in tenants:
                index.upsert([make_chunk(tenant, f"s:d:{round_}", f"nozzle {tenant} {round_}")])
                assert index.search("nozzle", 10, tenants[0])  # a reader outlives its writer
        index.delete(tenants[0], ["s:d:0"])
        assert [index.count(t) for t in tenants] == [1] + [2] * (len(tenants) - 1)
        assert index.tenants() == sorted(tenants)
        assert index.search("nozzle", 10, "nobody") == [] and index.count("nobody") == 0
        index.delete("nobody", ["s:d:0"])  # an unknown tenant: nothing to delete, no index made
        assert "nobody" not in index.tenants()
    finally:
        index.close()


def test_read_only_sees_the_writers_commits_after_reload(
    tmp_path: Path, make_chunk: MakeChunk
) -> None:
    writer = TenantIndexes.open(tmp_path / "bm25")
    try:
        writer.upsert([make_chunk("alpha", "s:a:0", "shock tube")])
        reader = TenantIndexes.open(tmp_path / "bm25", read_only=True)
        assert [h.chunk_id for h in reader.search("shock", 5, "alpha")] == ["s:a:0"]
        writer.upsert([make_chunk("alpha", "s:a:1", "shock wave")])
        reader.reload()
        assert reader.count("alpha") == 2
        with pytest.raises(BackendUnavailable, match="read-only"):
            reader.upsert([make_chunk("alpha", "s:a:2", "x")])
        reader.close()
    finally:
        writer.close()
    with pytest.raises(BackendUnavailable, match="no per-tenant BM25"):
        TenantIndexes.open(tmp_path / "absent", read_only=True)
