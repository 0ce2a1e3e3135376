"""The index types of `dense.index` on real FAISS: the spec's rules, the flat -> trained switch,
removal, access filters, snapshots (old manifests included) and the memory each type takes."""

from __future__ import annotations

import json

import faiss
import numpy as np
import pytest

from ragindex.config import DenseIndexSpec, HnswSpec, parse_spec
from ragindex.errors import InvalidInput
from ragindex.shards import DenseShard, TenantPartition
from ragindex.shards.partition import choose_kind, ivf_probes
from ragindex.types import ModelIdentity

DIM = 16
HNSW = HnswSpec(m=16, ef_construction=64, ef_search=64)
IVF = {"train_min": 200, "ivf": {"nlist": 8, "nprobe": 6}}
SPECS = {
    "hnsw_sq8": DenseIndexSpec(type="hnsw_sq8", train_min=200),
    "ivf_pq": DenseIndexSpec.model_validate(
        {
            **IVF,
            "type": "ivf_pq",
            "pq": {"m": 4, "nbits": 6},
            "refine": {"storage": "flat", "kFactor": 8},
        }
    ),
    "ivf_pq_sq4": DenseIndexSpec.model_validate(
        {
            **IVF,
            "type": "ivf_pq",
            "pq": {"m": 8, "nbits": 5},
            "refine": {"storage": "sq4", "kFactor": 8},
        }
    ),
    "ivf_sq8": DenseIndexSpec.model_validate(
        {**IVF, "type": "ivf_sq8", "refine": {"storage": "fp16", "kFactor": 8}}
    ),
    "ivf_pq_disk": DenseIndexSpec.model_validate(
        {
            **IVF,
            "type": "ivf_pq",
            "pq": {"m": 4, "nbits": 6},
            "refine": {"storage": "disk", "kFactor": 8},
        }
    ),
}
# How far a score may be from the float32 inner product, by refine (or HNSW) storage.
TOLERANCE = {
    "hnsw_sq8": 0.02,
    "ivf_pq": 1e-5,
    "ivf_pq_sq4": 0.2,
    "ivf_sq8": 2e-3,
    "ivf_pq_disk": 1e-5,
}
# recall@10 against exact search on these 16-d random vectors (4-bit refine codes of 16
# dimensions misorder close neighbours; at 384 dimensions their errors average out)
MIN_RECALL = {"hnsw_sq8": 0.9, "ivf_pq": 0.9, "ivf_pq_sq4": 0.7, "ivf_sq8": 0.9, "ivf_pq_disk": 0.9}


def unit(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def exact_top(x: np.ndarray, ids: list[str], q: np.ndarray, k: int) -> list[str]:
    return [ids[i] for i in np.argsort(-(x @ q), kind="stable")[:k]]


def recall(part: TenantPartition, x: np.ndarray, ids: list[str], k: int = 10) -> float:
    found = 0
    queries = unit(20, seed=77)
    for q in queries:
        found += len({h.chunk_id for h in part.search(q, k)} & set(exact_top(x, ids, q, k)))
    return found / (k * len(queries))


# --- the spec ----------------------------------------------------------------------------


def test_default_is_todays_hnsw_and_every_type_states_its_training_minimum() -> None:
    spec = parse_spec({})
    assert spec.dense.index.type == "hnsw" and spec.dense.index.training_minimum == 0
    assert DenseIndexSpec(type="hnsw_sq8").training_minimum == 1000
    assert DenseIndexSpec(type="ivf_sq8", ivf={"nlist": 100}).training_minimum == 3900
    assert DenseIndexSpec(type="ivf_pq", ivf={"nlist": 100}).training_minimum == 39 * 256
    assert DenseIndexSpec(type="ivf_pq", ivf={"nlist": 1024}).training_minimum == 39 * 1024
    assert DenseIndexSpec(type="ivf_pq", train_min=5000, ivf={"nlist": 64}).training_minimum == 5000
    # a spec of today (dense.hnsw only) is still valid and means the same
    old = parse_spec({"dense": {"hnsw": {"m": 16, "efSearch": 64}, "exactThreshold": 10}})
    assert old.dense.index == DenseIndexSpec() and old.dense.hnsw.m == 16


@pytest.mark.parametrize(
    ("index", "message"),
    [
        (
            {"type": "ivf_sq8", "trainMin": 100, "ivf": {"nlist": 256}},
            "dense.index.trainMin (100) must be >= ivf.nlist (256)",
        ),
        (
            {"type": "ivf_pq", "trainMin": 200, "ivf": {"nlist": 64}},
            "dense.index.trainMin (200) must be >= max(ivf.nlist, 2^pq.nbits) (256)",
        ),
        ({"ivf": {"nlist": 0}}, "dense.index.ivf.nlist"),
        ({"type": "ivf_flat"}, "dense.index.type: Input should be"),
        ({"pq": {"nbits": 12}}, "dense.index.pq.nbits"),
        ({"refine": {"storage": "pq"}}, "dense.index.refine.storage"),
        ({"refine": {"kFactor": 0}}, "dense.index.refine.kFactor"),
    ],
)
def test_bad_index_specs_are_refused_naming_the_field(index: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_spec({"dense": {"index": index}})
    assert message in str(err.value)


def test_pq_m_must_divide_the_dimension_when_a_shard_opens() -> None:
    spec = DenseIndexSpec(type="ivf_pq", train_min=300, ivf={"nlist": 4}, pq={"m": 5})
    identity = ModelIdentity("m", "0" * 64, DIM, True)
    with pytest.raises(InvalidInput, match=r"dense.index.pq.m \(5\) must divide .* \(16\)"):
        DenseShard(identity, HNSW, 0, spec)
    with pytest.raises(InvalidInput, match=r"dense\.index\.pq\.m"):
        TenantPartition(DIM, HNSW, 0, spec)
    DenseShard(identity, HNSW, 0, spec.model_copy(update={"type": "ivf_sq8"}))  # no PQ: fine


def test_choose_kind_is_flat_until_both_the_threshold_and_the_training_minimum() -> None:
    ivf = SPECS["ivf_pq"]  # trains from 200 vectors
    assert choose_kind(100, 0, ivf) == "flat"
    assert choose_kind(199, 0, ivf) == "flat"
    assert choose_kind(200, 0, ivf) == "ivf_pq"
    assert choose_kind(200, 200, ivf) == "flat"  # at the threshold: still exact
    assert choose_kind(201, 200, ivf) == "ivf_pq"
    assert choose_kind(1, 0) == "hnsw" and choose_kind(0, 0) == "flat"  # today's rule
    assert choose_kind(5, 0, DenseIndexSpec(type="hnsw_sq8", train_min=5)) == "hnsw_sq8"


def test_ivf_probes_rise_with_filters_and_large_k() -> None:
    assert ivf_probes(8, 1024, 40, 1_000_000) == 8
    assert ivf_probes(8, 1024, 40, 1_000_000, share=0.25) == 32
    assert ivf_probes(8, 64, 640, 6400) == 13  # lists of 100: 13 hold twice the candidates
    assert ivf_probes(8, 64, 6000, 6400) == 64  # k x kFactor near the partition: every list
    assert ivf_probes(8, 64, 100, 6400) == 8 and ivf_probes(1, 64, 100, 6400) == 2
    assert ivf_probes(8, 16, 10, 0) == 16


# --- partitions of each type ---------------------------------------------------------------


@pytest.mark.parametrize("name", list(SPECS))
def test_the_partition_trains_when_it_crosses_the_minimum_and_keeps_recall(name: str) -> None:
    spec = SPECS[name]
    part = TenantPartition(DIM, HNSW, 0, spec)
    x = unit(600)
    ids = [f"c{i}" for i in range(600)]
    part.upsert(ids[:150], x[:150])
    part.upsert(ids[150:199], x[150:199])
    assert part.kind == "flat" and len(part) == 199  # below the training minimum: exact
    q = unit(1, seed=5)[0]
    assert [h.chunk_id for h in part.search(q, 10)] == exact_top(x[:199], ids[:199], q, 10)
    part.upsert(ids[199:200], x[199:200])  # the 200th vector: trained on these 200
    assert part.kind == spec.type
    part.upsert(ids[200:], x[200:])
    assert part.kind == spec.type and len(part) == 600
    assert recall(part, x, ids) >= MIN_RECALL[name]
    for i in range(0, 600, 50):  # each vector finds itself, scored as its stored codes say
        hit = part.search(x[i], 1)[0]
        assert hit.chunk_id == ids[i]
        assert hit.score == pytest.approx(1.0, abs=TOLERANCE[name])


@pytest.mark.parametrize("name", list(SPECS))
def test_deletes_and_replacements_are_never_returned(name: str) -> None:
    spec = SPECS[name]
    part = TenantPartition(DIM, HNSW, 0, spec)
    x = unit(400)
    ids = [f"c{i}" for i in range(400)]
    part.upsert(ids, x)
    deleted = set(ids[::4])
    assert part.delete([*sorted(deleted), "never-was"]) == 100
    part.upsert(["c1"], x[2:3])  # c1 now stands where c2 is
    assert len(part) == 300
    if spec.type in ("ivf_pq", "ivf_sq8"):  # IVF removes; nothing is left to tombstone
        assert part.tombstones == 0 and part._index.ntotal == 300
        # the 100 deleted refine codes were dropped at once (over 10 % of the live ones);
        # c1's old one waits for more, or for a snapshot
        assert part._refine.ntotal == 301
        part.to_files()
        assert part._refine.ntotal == 300
    else:
        assert part.tombstones == 101  # 100 deleted, and c1's old vector
    for i in range(0, 400, 9):
        found = [h.chunk_id for h in part.search(x[i], 50)]
        assert not set(found) & deleted and len(found) == len(set(found)) == 50
    near_c2 = [h.chunk_id for h in part.search(x[2], 2)]
    assert sorted(near_c2) == ["c1", "c2"]
    assert "c1" not in {h.chunk_id for h in part.search(x[1], 5)}  # its old vector is gone
    everything = {h.chunk_id for h in part.search(x[3], 400)}
    # HNSW (float32 too) finds ~80 % when k is past the live vectors and tombstones are many
    share = 0.75 if spec.type == "hnsw_sq8" else 0.99
    assert everything <= set(ids) - deleted and len(everything) >= share * 300
    part.compact()  # rebuilt (and retrained) from the live vectors
    assert part.kind == spec.type and part.tombstones == 0 and len(part) == 300
    live = [i for i, c in enumerate(ids) if c not in deleted and c != "c1"]
    assert recall(part, x[live], [ids[i] for i in live]) >= MIN_RECALL[name] - 0.05


@pytest.mark.parametrize("share", [0.02, 0.2, 0.6, 1.0])
@pytest.mark.parametrize("name", list(SPECS))
def test_access_filters_choose_inside_the_index(name: str, share: float) -> None:
    part = TenantPartition(DIM, HNSW, 50, SPECS[name])
    x = unit(1500)
    ids = [f"c{i}" for i in range(1500)]
    part.upsert(ids, x)
    assert part.kind == SPECS[name].type
    deleted = set(ids[::7])
    part.delete(sorted(deleted))
    rng = np.random.default_rng(3)
    allowed = frozenset(c for c in ids if rng.random() < share)
    live = [i for i, c in enumerate(ids) if c in allowed and c not in deleted]
    recalls = []
    for seed in range(15):
        q = unit(1, seed=200 + seed)[0]
        found = [h.chunk_id for h in part.search(q, 10, allowed)]
        assert set(found) <= allowed - deleted and len(found) == min(10, len(live))
        truth = exact_top(x[live], [ids[i] for i in live], q, 10)
        recalls.append(len(set(found) & set(truth)) / len(truth))
    assert np.mean(recalls) >= MIN_RECALL[name]
    assert part.search(x[0], 10, frozenset()) == []


@pytest.mark.parametrize("name", list(SPECS))
def test_a_filter_allowing_every_live_chunk_searches_as_no_filter(name: str) -> None:
    part = TenantPartition(DIM, HNSW, 50, SPECS[name])
    x = unit(600)
    ids = [f"c{i}" for i in range(600)]
    part.upsert(ids, x)
    part.delete(ids[::5])
    everyone = frozenset(ids) | {"never-written"}  # retired and unknown ids select nothing
    live = frozenset(part.chunk_ids())
    for seed in range(5):
        q = unit(1, seed=300 + seed)[0]
        assert part.search(q, 10, everyone) == part.search(q, 10, live) == part.search(q, 10)


@pytest.mark.parametrize("name", list(SPECS))
def test_snapshot_bytes_round_trip_and_query_parameters_change_in_place(name: str) -> None:
    spec = SPECS[name]
    part = TenantPartition(DIM, HNSW, 0, spec)
    x = unit(500)
    part.upsert([f"c{i}" for i in range(500)], x)
    part.delete(["c1", "c2", "c3"])
    index_bytes, meta_bytes = part.to_files()
    assert json.loads(meta_bytes)["kind"] == spec.type
    copy = TenantPartition.from_files(index_bytes, meta_bytes, DIM, HNSW, 0, spec)
    assert copy.kind == spec.type and len(copy) == 497 and copy.tombstones == part.tombstones
    for q in unit(5, seed=3):
        assert copy.search(q, 10) == part.search(q, 10)
        allowed = frozenset(f"c{i}" for i in range(0, 500, 2))
        assert copy.search(q, 10, allowed) == part.search(q, 10, allowed)
    copy.upsert(["new"], x[1:2])  # internal ids continue after the saved ones
    assert copy.search(x[1], 1)[0].chunk_id == "new"
    assert copy.delete(["c4"]) == 1 and "c4" not in copy
    # query parameters come from the spec given at load (a new generation is not needed)
    wider = spec.model_copy(update={"ivf": spec.ivf.model_copy(update={"nprobe": 8})})
    again = TenantPartition.from_files(index_bytes, meta_bytes, DIM, HNSW, 0, wider)
    assert again.index.ivf.nprobe == 8 and len(again) == 497
    with pytest.raises((ValueError, RuntimeError)):  # FAISS: RuntimeError on bad bytes
        TenantPartition.from_files(
            index_bytes[: json.loads(meta_bytes).get("refine_at", 0) or -1],
            meta_bytes,
            DIM,
            HNSW,
            0,
            spec,
        )


# --- shards: manifests ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SPECS))
def test_shard_snapshot_records_the_index_type(name: str, tmp_path) -> None:
    identity = ModelIdentity("m", "0" * 64, DIM, True)
    spec = SPECS[name]
    shard = DenseShard(identity, HNSW, 0, spec)
    x = unit(300)
    shard.upsert("big", [f"b{i}" for i in range(300)], x)
    shard.upsert("small", [f"s{i}" for i in range(20)], x[:20])  # below the minimum: flat
    shard.save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert DenseIndexSpec.model_validate(manifest["index"]) == spec
    loaded = DenseShard.load(tmp_path)
    assert loaded.index == spec
    assert loaded.kind_of("big") == spec.type and loaded.kind_of("small") == "flat"
    assert loaded.stats() == shard.stats() and loaded.stats()["index_partitions"] == 1
    for q in unit(4, seed=9):
        for tenant in ("big", "small"):
            assert loaded.search(q, 10, tenant, identity) == shard.search(q, 10, tenant, identity)
    loaded.upsert("small", [f"s{i}" for i in range(20, 300)], x[20:])  # crosses: trained
    assert loaded.kind_of("small") == spec.type


def test_a_manifest_without_an_index_type_loads_as_hnsw(tmp_path) -> None:
    identity = ModelIdentity("m", "0" * 64, DIM, True)
    shard = DenseShard(identity, HNSW, 0)
    x = unit(50)
    shard.upsert("acme", [f"a{i}" for i in range(50)], x)
    shard.save(tmp_path)
    path = tmp_path / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["index"]  # as written before index types existed
    path.write_text(json.dumps(manifest))
    meta_path = tmp_path / manifest["partitions"]["acme"]["meta"]
    meta = json.loads(meta_path.read_text())
    assert "refine_at" not in meta  # an hnsw partition's files are as before
    loaded = DenseShard.load(tmp_path)
    assert loaded.index == DenseIndexSpec() and loaded.kind_of("acme") == "hnsw"
    assert loaded.search(x[3], 1, "acme", identity)[0].chunk_id == "a3"


# --- memory ---------------------------------------------------------------------------------


def test_quantized_types_take_the_memory_they_promise_at_384_dimensions() -> None:
    """FAISS's own sizes of each type's structures per vector (serialized: codes, graph links,
    inverted lists with their ids, refine codes), against HNSW over float32 (M 32): hnsw_sq8
    stays under 40 %, ivf_pq (48 x 8 bits) with sq4 refine codes under 15 %, and with its
    float32 refine vectors on disk under 5 %, the vectors whole on disk."""
    dim, n = 384, 2000
    x = unit(n, seed=1, dim=dim)
    ids = [f"c{i}" for i in range(n)]
    hnsw = HnswSpec(m=32, ef_construction=16, ef_search=64)
    sizes = {}
    for name, spec in {
        "hnsw": DenseIndexSpec(),
        "hnsw_sq8": DenseIndexSpec(type="hnsw_sq8"),
        "ivf_pq_sq4": DenseIndexSpec(
            type="ivf_pq", train_min=n, ivf={"nlist": 16}, refine={"storage": "sq4"}
        ),
        "ivf_pq_sq8": DenseIndexSpec(type="ivf_pq", train_min=n, ivf={"nlist": 16}),
        "ivf_pq_disk": DenseIndexSpec(
            type="ivf_pq", train_min=n, ivf={"nlist": 16}, refine={"storage": "disk"}
        ),
    }.items():
        part = TenantPartition(dim, hnsw, 0, spec)
        part.upsert(ids, x)
        assert part.kind == spec.type
        fixed = 16 * dim * 4 + 48 * 256 * 8 * 4  # IVF centroids and PQ codebooks, not per vector
        held, on_disk = part.memory_bytes()
        assert on_disk == (n * dim * 4 if name == "ivf_pq_disk" else 0)
        sizes[name] = (held - (fixed if spec.type == "ivf_pq" else 0)) / n
    assert sizes["hnsw"] > 4 * dim  # float32 vectors and the graph
    assert sizes["hnsw_sq8"] <= 0.40 * sizes["hnsw"]
    assert sizes["ivf_pq_sq4"] <= 0.15 * sizes["hnsw"]
    assert sizes["ivf_pq_sq8"] == pytest.approx(48 + 8 + dim, abs=8)  # codes, id, refine codes
    assert sizes["ivf_pq_disk"] <= 0.05 * sizes["hnsw"]
    assert faiss.index_factory(dim, "SQ4").sa_code_size() == dim // 2


@pytest.mark.parametrize("name", ["ivf_pq", "ivf_sq8", "hnsw_sq8", "ivf_pq_disk"])
def test_random_writes_keep_the_index_and_its_refine_codes_in_step(name: str) -> None:
    """Interleaved upserts, replacements and deletes (one by one, as the log replays them) and
    snapshots: every live chunk finds itself first and nothing retired is ever returned."""
    spec = SPECS[name]
    part = TenantPartition(DIM, HNSW, 0, spec)
    rng = np.random.default_rng(11)
    x = unit(300, seed=4)
    part.upsert([f"c{i}" for i in range(250)], x[:250])
    live = {f"c{i}": x[i] for i in range(250)}
    for step in range(300):
        roll = rng.random()
        cid = f"c{rng.integers(0, 300)}"
        if roll < 0.45:
            part.delete([cid])
            live.pop(cid, None)
        else:
            v = unit(1, seed=1000 + step)
            part.upsert([cid], v)
            live[cid] = v[0]
        if step % 60 == 59:
            part = TenantPartition.from_files(*part.to_files(), DIM, HNSW, 0, spec)
        assert len(part) == len(live)
    assert part.kind == spec.type
    for cid, v in list(live.items())[::7]:
        hits = part.search(v, 5)
        assert hits[0].chunk_id == cid
        assert {h.chunk_id for h in hits} <= set(live)
    everything = {h.chunk_id for h in part.search(unit(1, seed=5)[0], 300)}
    assert everything <= set(live)
