"""ShardedDenseIndex and ShardReplica: routing, merge, durability, replicas, reopening."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ragindex.config import HnswSpec
from ragindex.errors import IdentityMismatch, InvalidInput
from ragindex.hashing import shard_for
from ragindex.shards import ShardedDenseIndex, ShardReplica
from ragindex.shards.sharded import shard_dir
from ragindex.shards.wal import WalLocked

DIM = 16


def ids_of(hits):
    return [h.chunk_id for h in hits]


def open_index(root, identity, hnsw, num_shards=3, threshold=1000):
    return ShardedDenseIndex.open(root, identity, num_shards, hnsw, threshold)


def test_search_merges_all_shards_like_one_exact_index(tmp_path, identity, hnsw, vecs):
    index = open_index(tmp_path, identity, hnsw)
    x = vecs(300)
    ids = [f"src:doc{i}:0" for i in range(300)]
    index.upsert("acme", ids, x)
    routed = {shard_for("acme", c, 3) for c in ids}
    assert routed == {0, 1, 2}
    assert [s["vectors"] for s in index.stats()["per_shard"]] == [
        sum(shard_for("acme", c, 3) == s for c in ids) for s in range(3)
    ]
    for q in vecs(10, seed=4):
        truth = [ids[i] for i in np.argsort(-(x @ q))[:10]]
        assert ids_of(index.search(q, 10, "acme", identity)) == truth
    assert index.count("acme") == 300 and index.count("globex") == 0
    index.close()


def test_acknowledged_writes_survive_without_a_snapshot(tmp_path, identity, hnsw, vecs):
    index = open_index(tmp_path, identity, hnsw)
    x = vecs(50)
    index.upsert("acme", [f"a{i}" for i in range(50)], x)
    index.delete("acme", ["a3", "a4"])
    index.upsert("acme", ["a5"], x[0:1])
    index.close(snapshot=False)  # as if the process died: only the WAL has the writes
    again = open_index(tmp_path, identity, hnsw)
    assert again.count("acme") == 48
    hits = ids_of(again.search(x[0], 2, "acme", identity))
    assert sorted(hits) == ["a0", "a5"]
    assert not {"a3", "a4"} & set(ids_of(again.search(x[3], 48, "acme", identity)))
    again.save()
    for i in range(3):  # the snapshot covers the log, which is cut back to one empty segment
        segments = list((shard_dir(tmp_path, i) / "wal").glob("*.wal"))
        assert len(segments) == 1 and segments[0].stat().st_size == 0
    again.close()
    assert open_index(tmp_path, identity, hnsw).count("acme") == 48


def test_replica_catches_up_with_another_process(tmp_path, identity, hnsw, vecs):
    index = open_index(tmp_path, identity, hnsw, num_shards=1)
    x = vecs(20)
    index.upsert("acme", [f"a{i}" for i in range(10)], x[:10])
    index.save()
    index.upsert("acme", ["a10"], x[10:11])  # in the WAL only
    index.close(snapshot=False)
    replica = ShardReplica(shard_dir(tmp_path, 0))
    assert replica.shard.count("acme") == 11  # snapshot + replay
    writer = textwrap.dedent(
        f"""
        import numpy as np
        from pathlib import Path
        from ragindex.config import HnswSpec
        from ragindex.shards import ShardedDenseIndex
        from ragindex.types import ModelIdentity
        identity = ModelIdentity.from_dict({identity.to_dict()!r})
        hnsw = HnswSpec.model_validate({hnsw.model_dump()!r})
        x = np.load({str(tmp_path / "x.npy")!r})
        index = ShardedDenseIndex.open(Path({str(tmp_path)!r}), identity, 1, hnsw, 1000)
        index.upsert("acme", [f"a{{i}}" for i in range(11, 20)], x[11:20])
        index.delete("acme", ["a0"])
        index.close(snapshot=False)
        """
    )
    np.save(tmp_path / "x.npy", x)
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=120)
    assert replica.catch_up() == 2
    assert replica.shard.count("acme") == 19
    assert ids_of(replica.search(x[15], 1, "acme", identity)) == ["a15"]
    assert "a0" not in ids_of(replica.search(x[0], 19, "acme", identity))
    assert replica.catch_up() == 0
    # the writer snapshots and truncates past this replica: it reloads the snapshot
    stale = ShardReplica(shard_dir(tmp_path, 0))
    index = open_index(tmp_path, identity, hnsw, num_shards=1)
    index.upsert("acme", ["late"], x[:1])
    index.save()
    index.upsert("acme", ["later"], x[1:2])
    assert stale.catch_up() >= 1
    assert stale.shard.count("acme") == 21
    assert set(ids_of(stale.search(x[1], 2, "acme", identity))) == {"later", "a1"}
    index.close()


def test_one_writer_per_index(tmp_path, identity, hnsw):
    index = open_index(tmp_path, identity, hnsw)
    with pytest.raises(WalLocked):
        open_index(tmp_path, identity, hnsw)
    index.close()
    index.close()  # a second close does nothing
    with pytest.raises(InvalidInput, match="closed"):
        index.upsert("acme", ["a"], np.ones((1, DIM)))
    open_index(tmp_path, identity, hnsw).close()


def test_reopening_with_another_identity_or_shard_count_is_refused(
    tmp_path, identity, other_identity, hnsw
):
    open_index(tmp_path, identity, hnsw).close()
    with pytest.raises(IdentityMismatch, match=r"other-model.*test-model"):
        open_index(tmp_path, other_identity, hnsw)
    with pytest.raises(InvalidInput, match="has 3 shards, not 2"):
        open_index(tmp_path, identity, hnsw, num_shards=2)
    for bad in (0, -1, True):
        with pytest.raises(InvalidInput, match="num_shards"):
            open_index(tmp_path / "new", identity, hnsw, num_shards=bad)
    assert not (tmp_path / "new").exists()
    bigger_ef = open_index(
        tmp_path, identity, HnswSpec(m=32, ef_construction=200, ef_search=512), threshold=5
    )
    assert bigger_ef.stats()["vectors"] == 0
    bigger_ef.close()


def test_bad_input_is_rejected_before_anything_is_logged(
    tmp_path, identity, other_identity, hnsw, vecs
):
    index = open_index(tmp_path, identity, hnsw)
    index.upsert("acme", ["a"], vecs(1))
    offsets = [s["wal_offset"] for s in index.stats()["per_shard"]]
    nan = vecs(3)
    nan[2, 0] = np.nan
    with pytest.raises(InvalidInput, match="NaN"):
        index.upsert("acme", ["x", "y", "z"], nan)
    with pytest.raises(InvalidInput, match="shape"):
        index.upsert("acme", ["x"], vecs(1, dim=DIM - 1))
    with pytest.raises(InvalidInput, match="tenant_id"):
        index.upsert("", ["x"], vecs(1))
    with pytest.raises(InvalidInput, match="tenant_id"):
        index.delete("ACME", ["a"])
    with pytest.raises(InvalidInput, match="tenant_id"):
        index.search(vecs(1)[0], 5, "bad tenant", identity)
    with pytest.raises(IdentityMismatch):
        index.search(vecs(1)[0], 5, "acme", other_identity)
    assert [s["wal_offset"] for s in index.stats()["per_shard"]] == offsets
    index.close(snapshot=False)
    again = open_index(tmp_path, identity, hnsw)
    assert again.count("acme") == 1
    again.close()
