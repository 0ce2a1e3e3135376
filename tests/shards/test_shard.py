"""DenseShard: tenant isolation, identity, bad input, snapshots (round trip, crash safety)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragindex.config import HnswSpec
from ragindex.errors import IdentityMismatch, InvalidInput
from ragindex.shards import DenseShard
from ragindex.types import ModelIdentity

DIM = 16


def ids_of(hits):
    return [h.chunk_id for h in hits]


@pytest.mark.parametrize("threshold", [1000, 0], ids=["flat", "hnsw"])
def test_identical_vectors_of_two_tenants_never_cross(identity, hnsw, vecs, threshold):
    shard = DenseShard(identity, hnsw, threshold)
    x = vecs(40)
    shard.upsert("acme", [f"a{i}" for i in range(40)], x)
    shard.upsert("globex", [f"b{i}" for i in range(40)], x)
    shard.upsert("globex", ["shared-id"], x[:1])
    shard.upsert("acme", ["shared-id"], x[1:2])
    for q in x[:10]:
        a = ids_of(shard.search(q, 40, "acme", identity))
        b = ids_of(shard.search(q, 40, "globex", identity))
        assert a and all(c.startswith("a") or c == "shared-id" for c in a)
        assert b and all(c.startswith("b") or c == "shared-id" for c in b)
    assert ids_of(shard.search(x[0], 1, "globex", identity)) in (["shared-id"], ["b0"])
    assert ids_of(shard.search(x[1], 1, "acme", identity)) in (["shared-id"], ["a1"])
    shard.delete("acme", ["shared-id"])
    assert "shared-id" in ids_of(shard.search(x[0], 2, "globex", identity))
    assert shard.search(x[0], 5, "initech", identity) == []
    assert shard.count("acme") == 40 and shard.count("globex") == 41


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.lists(
        st.tuples(st.sampled_from(["t1", "t2", "t3"]), st.integers(0, 30), st.integers(0, 10**6)),
        min_size=1,
        max_size=40,
    ),
    query_seed=st.integers(0, 10**6),
)
def test_property_search_returns_only_the_tenants_own_live_chunks(identity, data, query_seed):
    """Whatever the writes, a search returns only chunks the tenant holds now."""
    shard = DenseShard(identity, HnswSpec(m=8, ef_construction=32, ef_search=32), exact_threshold=5)
    owned: dict[str, set[str]] = {"t1": set(), "t2": set(), "t3": set()}
    for tenant, n, seed in data:
        cid = f"c{n}"
        if seed % 4 == 0:
            shard.delete(tenant, [cid])
            owned[tenant].discard(cid)
        else:
            shard.upsert(tenant, [cid], np.random.default_rng(seed).standard_normal((1, DIM)) + 0.1)
            owned[tenant].add(cid)
    q = np.random.default_rng(query_seed).standard_normal(DIM) + 0.1
    for tenant, chunks in owned.items():
        got = ids_of(shard.search(q, 50, tenant, identity))
        assert set(got) <= chunks
        assert len(got) == len(set(got))
        assert shard.count(tenant) == len(chunks)


def test_other_identity_is_refused_naming_both(identity, other_identity, hnsw, vecs):
    shard = DenseShard(identity, hnsw, 1000)
    shard.upsert("acme", ["a"], vecs(1))
    with pytest.raises(IdentityMismatch) as err:
        shard.search(vecs(1)[0], 1, "acme", other_identity)
    assert "other-model" in str(err.value) and "test-model" in str(err.value)
    same_name = ModelIdentity("test-model", "abc123", DIM, normalized=True, query_prefix="q: ")
    with pytest.raises(IdentityMismatch):
        shard.search(vecs(1)[0], 1, "acme", same_name)


def test_bad_input_is_rejected_and_changes_nothing(identity, hnsw, vecs, tmp_path):
    shard = DenseShard(identity, hnsw, 1000)
    shard.upsert("acme", ["a", "b"], vecs(2))
    shard.save(tmp_path)
    before = (tmp_path / "manifest.json").read_bytes()
    nan = vecs(1)
    nan[0, 0] = np.inf
    for tenant in ["", None, "Acme", "a/b", "-x", "x" * 64, 7]:
        with pytest.raises(InvalidInput, match="tenant_id"):
            shard.upsert(tenant, ["z"], vecs(1))
        with pytest.raises(InvalidInput, match="tenant_id"):
            shard.search(vecs(1)[0], 1, tenant, identity)
    with pytest.raises(InvalidInput, match="shape"):
        shard.upsert("newco", ["z"], vecs(1, dim=DIM * 2))
    with pytest.raises(InvalidInput, match="NaN or infinite"):
        shard.upsert("acme", ["a"], nan)
    with pytest.raises(InvalidInput, match="query_vector"):
        shard.search(vecs(1, dim=3)[0], 1, "acme", identity)
    with pytest.raises(InvalidInput, match="NaN"):
        shard.search(nan[0], 1, "acme", identity)
    assert shard.tenants() == ["acme"] and shard.count("acme") == 2
    assert ids_of(shard.search(vecs(2)[0], 1, "acme", identity)) == ["a"]
    assert (tmp_path / "manifest.json").read_bytes() == before


def test_save_load_round_trip(identity, hnsw, vecs, tmp_path):
    shard = DenseShard(identity, hnsw, exact_threshold=50)
    x = vecs(120)
    shard.upsert("big", [f"b{i}" for i in range(120)], x)  # HNSW with tombstones
    shard.delete("big", ["b0", "b1"])
    shard.upsert("small", [f"s{i}" for i in range(10)], x[:10])  # flat
    shard.upsert("gone", ["g"], x[:1])
    shard.delete("gone", ["g"])
    shard.wal_offset = 1234
    shard.save(tmp_path)
    loaded = DenseShard.load(tmp_path)
    assert loaded.identity == identity and loaded.hnsw == hnsw and loaded.exact_threshold == 50
    assert loaded.wal_offset == 1234
    assert loaded.stats() == shard.stats()
    assert loaded.tenants() == ["big", "small"]
    for q in vecs(5, seed=7):
        for tenant in ("big", "small"):
            assert loaded.search(q, 10, tenant, identity) == shard.search(q, 10, tenant, identity)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["identity"] == identity.to_dict() and manifest["generation"] == 1
    shard.compact()
    shard.save(tmp_path)  # second generation replaces the first; old files are removed
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "g2-big.faiss",
        "g2-big.json",
        "g2-small.faiss",
        "g2-small.json",
        "manifest.json",
    ]
    assert DenseShard.load(tmp_path).stats()["tombstones"] == 0
    overridden = DenseShard.load(
        tmp_path, HnswSpec(m=16, ef_construction=64, ef_search=300), exact_threshold=7
    )
    assert overridden.hnsw.ef_search == 300 and overridden.exact_threshold == 7


def test_crash_before_the_manifest_rename_leaves_the_old_snapshot(
    identity, hnsw, vecs, tmp_path, monkeypatch
):
    shard = DenseShard(identity, hnsw, 1000)
    x = vecs(20)
    shard.upsert("acme", [f"a{i}" for i in range(10)], x[:10])
    shard.save(tmp_path)
    shard.upsert("acme", [f"a{i}" for i in range(10, 20)], x[10:])
    shard.delete("acme", ["a0"])
    real_replace = os.replace

    def crash_on_manifest(src, dst):
        if str(dst).endswith("manifest.json"):
            raise OSError("injected crash before the manifest rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_manifest)
    with pytest.raises(OSError, match="injected"):
        shard.save(tmp_path)
    monkeypatch.setattr(os, "replace", real_replace)
    old = DenseShard.load(tmp_path)
    assert old.count("acme") == 10
    assert ids_of(old.search(x[0], 1, "acme", identity)) == ["a0"]
    shard.save(tmp_path)  # the next save succeeds and clears the debris
    assert DenseShard.load(tmp_path).count("acme") == 19
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_load_of_a_missing_snapshot_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no dense shard snapshot"):
        DenseShard.load(tmp_path)
