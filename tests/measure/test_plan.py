"""`ragindex plan`: the pure planning function on fixed constants, and its CLI on the shipped
ones."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.measure.plan import (
    ASSUMPTIONS,
    CONSTANTS,
    LARGE_SHARD_REFINE_K_FACTOR,
    MIN_REPLICAS,
    REFINE_K_FACTOR,
    REFINE_K_FACTOR_MEASURED_UP_TO,
    PlanInput,
    dense_spec_for,
    ivf_nlist_for,
    ivf_nprobe_for,
    ivf_settings_for,
    latency_at,
    load_constants,
    make_plan,
    refine_k_factor_for,
)

GIB = 1 << 30


def constants() -> dict[str, Any]:
    """Round numbers of the shape `bench scale --constants` writes."""
    row = {
        "code_bytes_per_dim": 1.0,
        "index_overhead_bytes_per_vector": 300.0,
        "replica_overhead_bytes_per_vector": 200.0,
        "snapshot_extra_bytes_per_vector": 100.0,
        "build_vectors_per_s": 1000.0,
        "bootstrap_bytes_per_s": 100e6,
        "p50_ms": {"100000": 0.5, "300000": 0.6},
        "p99_ms": {"100000": 1.0, "300000": 1.2},
        "recall@10": {"100000": 0.99, "300000": 0.98},
    }
    return {
        "measured": {"machine": "test", "date": "2026-12-06", "note": "fixed", "command": "-"},
        "dim": 384,
        "apply_batch_records": 2000,
        "types": {"hnsw_sq8": row, "ivf_pq": copy.deepcopy(row)},
        "assumptions": ASSUMPTIONS,
    }


def request(**changes: Any) -> PlanInput:
    base = {
        "chunks": 10_000_000,
        "dim": 384,
        "index_type": "hnsw_sq8",
        "qps": 200,
        "p99_ms": 50,
        "freshness_s": 5,
    }
    return PlanInput(**{**base, **changes})


def test_ten_million_at_384_dims() -> None:
    plan = make_plan(request(), constants())
    per_chunk = 384 + 300 + 200 + ASSUMPTIONS["text_bytes_per_chunk"]["value"]
    assert plan.vectors_per_shard * plan.shards >= 10_000_000
    assert plan.memory_gib_per_replica == pytest.approx(
        plan.vectors_per_shard * per_chunk / GIB, abs=0.01
    )
    # the peak, while a snapshot's copy of the index and its other bytes are held, decides
    peak_per_chunk = per_chunk + 384 + 300 + 100
    assert plan.memory_peak_gib_per_replica <= 16
    assert plan.memory_peak_gib_per_replica == pytest.approx(
        plan.vectors_per_shard * peak_per_chunk / GIB, abs=0.01
    )
    assert plan.shards == -(-10_000_000 * peak_per_chunk // (16 * GIB))
    assert plan.replicas >= MIN_REPLICAS
    assert plan.nodes >= plan.replicas
    assert plan.extrapolated and plan.measured_sizes == [100_000, 300_000]
    assert plan.search_p99_ms <= plan.dense_budget_ms == 22.0
    # snapshot = index codes + extra; bootstrap at the measured rate
    snapshot = plan.vectors_per_shard * (384 + 300 + 100)
    assert plan.snapshot_gib_per_shard == pytest.approx(snapshot / GIB, abs=0.01)
    assert plan.bootstrap_s == pytest.approx(snapshot / 100e6, abs=0.1)
    assert plan.ingest_cpu_core_hours == pytest.approx(10_000_000 / 18 / 3600, abs=0.1)
    assert plan.ingest_gpu_hours < plan.ingest_cpu_core_hours / 16


def test_ivf_nlist_and_training_floor_grow_with_the_shard() -> None:
    assert ivf_nlist_for(100_000) == 1024  # the spec's default at the size it was measured at
    assert ivf_nlist_for(1_000_000) == 4096
    assert ivf_nlist_for(1) == 4 and ivf_nlist_for(10**12) == 65_536
    plan = make_plan(request(index_type="ivf_pq"), constants())
    nlist = ivf_nlist_for(plan.vectors_per_shard)
    ivf = {"nlist": nlist, "nprobe": ivf_nprobe_for(plan.vectors_per_shard)}
    index: dict[str, Any] = {"type": "ivf_pq", "ivf": ivf}
    if plan.vectors_per_shard > REFINE_K_FACTOR_MEASURED_UP_TO:
        index["refine"] = {"kFactor": LARGE_SHARD_REFINE_K_FACTOR}
    assert plan.dense_spec == {"shards": plan.shards, "index": index}
    written = RagIndexSpec.model_validate({"dense": plan.dense_spec})  # accepted as written
    assert written.dense.index.training_minimum == 39 * nlist  # the floor follows nlist
    hnsw = make_plan(request(), constants())
    assert hnsw.dense_spec == {"shards": hnsw.shards, "index": {"type": "hnsw_sq8"}}


def test_ivf_nprobe_shrinks_with_the_fourth_root_of_the_shard_down_to_its_floor() -> None:
    """nprobe 64 where it was measured (100 k), fewer lists as they grow (with the fourth
    root), never below the floor, never above the shard's nlist."""
    sizes = [1, 1000, 100_000, 300_000, 1_000_000, 10_000_000, 30_000_000, 10**9]
    probes = [ivf_nprobe_for(n) for n in sizes]
    assert probes == [4, 128, 64, 49, 36, 20, 16, 16]
    assert all(p <= ivf_nlist_for(n) for p, n in zip(probes, sizes, strict=True))
    assert ivf_settings_for(1_000_000) == {"nlist": 4096, "nprobe": 36}
    written = RagIndexSpec.model_validate(
        {"dense": {"index": {"type": "ivf_pq", "ivf": ivf_settings_for(10**9)}}}
    )
    assert written.dense.index.ivf.nprobe == 16 and written.dense.index.ivf.nlist == 65_536


def test_ivf_pq_refines_more_candidates_past_the_size_where_8_was_measured() -> None:
    assert RagIndexSpec().dense.index.refine.k_factor == REFINE_K_FACTOR  # the spec's default
    small, large = REFINE_K_FACTOR_MEASURED_UP_TO, REFINE_K_FACTOR_MEASURED_UP_TO + 1
    assert refine_k_factor_for("ivf_pq", small) == REFINE_K_FACTOR
    assert refine_k_factor_for("ivf_pq", large) == LARGE_SHARD_REFINE_K_FACTOR
    for index_type in ("hnsw", "hnsw_sq8", "ivf_sq8"):  # their recall does not rest on it
        assert refine_k_factor_for(index_type, large) == REFINE_K_FACTOR
    assert dense_spec_for("ivf_pq", 2, small)["index"] == {
        "type": "ivf_pq",
        "ivf": {"nlist": 2048, "nprobe": 49},
    }
    large_spec = dense_spec_for("ivf_pq", 2, 1_000_000)
    assert large_spec["index"]["refine"] == {"kFactor": 16}
    written = RagIndexSpec.model_validate({"dense": large_spec})  # accepted as written
    assert written.dense.index.refine.k_factor == 16
    assert "refine" not in dense_spec_for("ivf_sq8", 2, 1_000_000)["index"]


def test_more_dimensions_cost_more() -> None:
    small, large = make_plan(request(), constants()), make_plan(request(dim=768), constants())
    assert large.shards * large.memory_gib_per_replica > small.shards * small.memory_gib_per_replica
    assert large.ingest_cpu_core_hours > small.ingest_cpu_core_hours
    assert large.embedder_cores > small.embedder_cores


def test_load_adds_replicas_and_tight_latency_adds_shards() -> None:
    c = constants()
    assert make_plan(request(qps=20_000), c).replicas > make_plan(request(qps=10), c).replicas
    slow = constants()
    slow["types"]["hnsw_sq8"]["p99_ms"] = {"100000": 5.0, "300000": 8.0}
    assert make_plan(request(p99_ms=40), slow).shards > make_plan(request(), c).shards


def test_freshness_that_cannot_be_met_is_said() -> None:
    plan = make_plan(request(freshness_s=1), constants())
    assert any("freshness 1" in n for n in plan.notes)
    assert not make_plan(request(), constants()).notes


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"chunks": -5}, "--chunks must be >= 1"),
        ({"index_type": "annoy"}, "--index-type 'annoy' is unknown"),
        ({"dim": 0}, "--dim must be"),
        ({"qps": 0}, "--qps must be > 0"),
        ({"p99_ms": 20}, "leaves nothing for dense search"),
        ({"index_type": "ivf_sq8"}, "no measurements of ivf_sq8"),
        ({"replica_memory_gib": 0.001}, "no plan with at most"),
    ],
)
def test_bad_input_is_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        make_plan(request(**changes), constants())


def test_latency_interpolates_and_never_extrapolates_faster() -> None:
    points = [(100_000, 1.0), (1_000_000, 2.0)]
    assert latency_at(points, 100_000, "log") == pytest.approx(1.0)
    assert 1.0 < latency_at(points, 300_000, "log") < 2.0
    assert latency_at(points, 10_000_000, "log") == pytest.approx(4.0)  # slope 0.3 in log-log
    noisy = [(100_000, 1.0), (300_000, 0.9)]  # a busy box measured the larger one faster
    assert latency_at(noisy, 3_000_000, "log") > 0.9
    # IVF: the codes of a fixed nprobe grow with sqrt(n), those of the plan's nprobe with n^0.25
    assert latency_at([(100_000, 1.0)], 10_000_000, "sqrt") == pytest.approx(10.0)
    assert latency_at([(100_000, 1.0)], 10_000_000, "root4") == pytest.approx(100**0.25)


def test_the_shipped_constants_plan_ten_million() -> None:
    shipped = load_constants(CONSTANTS)
    assert shipped["measured"]["machine"] and shipped["measured"]["date"]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragindex.app.cli",
            "plan",
            "--chunks",
            "10000000",
            "--dim",
            "768",
            "--index-type",
            "hnsw_sq8",
            "--qps",
            "200",
            "--p99-ms",
            "50",
            "--freshness-s",
            "5",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "shards" in out.stdout and "replicas per shard" in out.stdout
    assert 'spec                  dense: {"shards": ' in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "ragindex.app.cli", "plan", "--chunks", "-1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode != 0 and "--chunks must be >= 1" in bad.stderr


def test_refine_vectors_on_disk_are_planned_as_disk_not_memory() -> None:
    """Constants measured with `refine.storage: disk` carry the refine vectors' bytes apart and
    the settings they were measured with: the plan counts those bytes as local disk, and its
    spec says to keep them there."""
    disk = constants()
    disk["types"]["ivf_pq"] |= {
        "code_bytes_per_dim": 0.125,
        "refine_disk_bytes_per_dim": 4.0,
        "index_settings": {"ivf": {"nprobe": 64}, "refine": {"storage": "disk", "kFactor": 16}},
    }
    in_memory = constants()
    in_memory["types"]["ivf_pq"]["code_bytes_per_dim"] = 0.125 + 4.0  # flat refine codes
    on_disk = make_plan(request(index_type="ivf_pq"), disk)
    held = make_plan(request(index_type="ivf_pq"), in_memory)
    assert on_disk.memory_gib_per_replica < held.memory_gib_per_replica
    assert on_disk.shards <= held.shards
    assert on_disk.refine_disk_gib_per_replica == pytest.approx(
        on_disk.vectors_per_shard * 4 * 384 / GIB, abs=0.01
    )
    assert held.refine_disk_gib_per_replica == 0
    # the scratch a replica needs: its refine vectors and three snapshots during a bootstrap
    assert on_disk.local_disk_gib_per_replica == pytest.approx(
        on_disk.refine_disk_gib_per_replica + 3 * on_disk.snapshot_gib_per_shard, abs=0.02
    )
    assert held.local_disk_gib_per_replica == pytest.approx(
        3 * held.snapshot_gib_per_shard, abs=0.02
    )
    index = on_disk.dense_spec["index"]
    assert index["refine"] == {"storage": "disk", "kFactor": 16}
    assert index["ivf"] == {"nlist": ivf_nlist_for(on_disk.vectors_per_shard), "nprobe": 64}
    written = RagIndexSpec.model_validate({"dense": on_disk.dense_spec})  # accepted as written
    assert written.dense.index.refine.storage == "disk" and written.dense.index.ivf.nprobe == 64
