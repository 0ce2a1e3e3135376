"""`ragindex bench scale` and its vectors at a small size: the report's shape and sanity, the
generator against held-out real MiniLM vectors, never wall-clock figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragindex.config import DenseIndexSpec, DenseSpec, IvfSpec
from ragindex.errors import InvalidInput
from ragindex.measure.bench.anchors import bundled_passages, real_passages, real_vectors
from ragindex.measure.bench.scale import (
    dense_with_index,
    plot_scale,
    run_scale,
    scale_goals,
    scale_table,
)
from ragindex.measure.bench.scale_vectors import (
    Generator,
    anchor_neighbours,
    calibrate,
    ks_distance,
    nn_distances,
    uniform_unit,
    validate,
)
from ragindex.measure.plan import PlanInput, constants_from_scale, ivf_settings_for, make_plan

REAL = 1000  # the bundled collections' first passages: embedded once, then cached

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real() -> np.ndarray:
    return real_vectors(REAL)


@pytest.fixture(scope="module")
def generator(real: np.ndarray) -> Generator:
    return calibrate(real, nn_distances(real), len(real))


def test_real_passages_are_a_deterministic_prefix() -> None:
    bundled = bundled_passages()
    assert len(bundled) > REAL
    assert real_passages(REAL) == bundled[:REAL]
    assert real_passages(len(bundled) + 20)[:-10] == real_passages(len(bundled) + 10)
    with pytest.raises(InvalidInput, match="count must be >= 1"):
        real_passages(0)


def test_ks_distance() -> None:
    a = np.linspace(0, 1, 101)
    assert ks_distance(a, a) == 0.0
    assert ks_distance(a, a + 2) == 1.0


def test_generated_vectors_are_deterministic_unit_and_not_copies(generator: Generator) -> None:
    x = generator.generate(3000, seed=5)
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(x, generator.generate(3000, seed=5))
    assert nn_distances(x).min() > 0  # the noise leaves no two equal
    # each lies near a real anchor, much nearer than a uniform vector does
    nearest = (x[:500] @ generator.anchors.T).max(axis=1)
    uniform = (uniform_unit(500, x.shape[1], 0) @ generator.anchors.T).max(axis=1)
    assert nearest.mean() > uniform.mean() + 0.3


def test_generated_vectors_match_held_out_real_ones(real: np.ndarray) -> None:
    report = validate(real, queries=100)
    assert report["real_vectors"] == report["anchors"] == 450
    real_q = [row["real"] for row in report["nn_distance_quantiles"].values()]
    assert real_q == sorted(real_q)
    # at this size a KS gap of ~0.09 is sampling noise (450 vs 450); uniform vectors are far off
    assert report["ks_distance"] <= 0.2
    median = report["nn_distance_quantiles"]["0.5"]
    assert abs(median["generated"] - median["real"]) < 0.05
    assert report["uniform_nn_distance_median"] > median["real"] + 0.2
    assert report["max_recall_gap"] <= 0.1
    for curve in report["recall@10"]["real"].values():
        assert all(0.0 <= r <= 1.0 for r in curve.values())


def test_validate_refuses_too_few_vectors(real: np.ndarray) -> None:
    with pytest.raises(InvalidInput, match="validation needs"):
        validate(real[:100], queries=100)


def test_bench_scale_small(generator: Generator, tmp_path: Path) -> None:
    dense = DenseSpec(exact_threshold=1000, index=DenseIndexSpec(ivf=IvfSpec(nlist=64)))
    report = run_scale(generator, [5000], ["hnsw", "ivf_sq8"], dense, queries=40)
    json.dumps(report)  # what --json writes
    rows = report["sizes"]["5000"]
    assert set(rows) == {"hnsw", "ivf_sq8"}
    for kind, row in rows.items():
        assert row["kind"] == kind  # built as the type, not left exact
        assert row["vectors"] == 5000 and row["bootstrap_tail_records"] == 50
        assert row["bootstrap_from_offset"] == 5000  # started from the published snapshot
        assert 0.0 <= row["recall@10"] <= 1.0
        for key in ("build_s", "index_bytes", "snapshot_bytes", "bootstrap_s", "p50_ms"):
            assert row[key] > 0, key
        assert row["p99_ms"] >= row["p50_ms"]
        assert row["snapshot_bytes"] > row["index_bytes"]  # texts and ids beside it
    assert rows["ivf_sq8"]["index_bytes"] < rows["hnsw"]["index_bytes"]
    assert rows["hnsw"]["recall@10"] >= 0.9
    filtered = report["filtered"]["hnsw"]
    assert list(filtered) == ["0.1%", "1.0%", "10.0%", "50.0%", "100.0%"]
    # shares of all the shard holds, the bootstrap's tail included
    assert filtered["0.1%"]["allowed"] == 10 and filtered["100.0%"]["allowed"] == 5050
    assert all(0.0 <= r["recall@10"] <= 1.0 for r in filtered.values())
    assert "5,000" in scale_table(report)
    assert plot_scale(report, tmp_path / "scale.png").stat().st_size > 0
    # the plan reads what the benchmark measured
    constants = constants_from_scale(report, "test")
    plan = make_plan(PlanInput(200_000, 384, "hnsw", 10, 100, 5), constants)
    assert plan.shards >= 1 and plan.extrapolated


def test_ivf_by_size_builds_each_size_with_the_plans_nlist_and_nprobe(
    generator: Generator,
) -> None:
    dense = DenseSpec(exact_threshold=1000, index=DenseIndexSpec(train_min=2000))
    report = run_scale(generator, [5000], ["ivf_sq8"], dense, queries=20, ivf_by_size=True)
    assert report["run"]["ivf_by_size"] == {"5000": ivf_settings_for(5000)}
    assert ivf_settings_for(5000) == {"nlist": 256, "nprobe": 135}
    row = report["sizes"]["5000"]["ivf_sq8"]
    assert row["kind"] == "ivf_sq8" and row["nlist"] == 256 and row["nprobe"] == 135
    ivf = report["run"]["dense"]["index"]["ivf"]
    assert ivf["nlist"] == 1024 and ivf["nprobe"] == 32  # the spec, as given
    # the plan's constants from it leave nprobe to the plan (measured with its own)
    assert "ivf" not in constants_from_scale(report, "test")["types"]["ivf_sq8"].get(
        "index_settings", {}
    )


def test_run_scale_refuses_bad_sizes_and_types(generator: Generator) -> None:
    with pytest.raises(InvalidInput, match="--sizes"):
        run_scale(generator, [10], ["hnsw"])
    with pytest.raises(InvalidInput, match="--types"):
        run_scale(generator, [5000], ["annoy"])


def test_index_option_sets_the_spec_fields_and_names_a_bad_one() -> None:
    dense = dense_with_index('{"refine": {"storage": "sq4", "kFactor": 16}, "ivf": {"nprobe": 64}}')
    assert (dense.index.refine.storage, dense.index.refine.k_factor) == ("sq4", 16)
    assert dense.index.ivf.nprobe == 64 and dense.index.ivf.nlist == 1024  # the rest: defaults
    with pytest.raises(InvalidInput, match=r"--index: dense\.index\.refine\.storage: Input should"):
        dense_with_index('{"refine": {"storage": "sq3"}}')
    with pytest.raises(InvalidInput, match="--index: not JSON"):
        dense_with_index("{refine: sq4}")
    with pytest.raises(InvalidInput, match=r"--index: dense\.index: Input should be a valid dict"):
        dense_with_index("[1]")


def test_anchor_neighbours_exclude_the_anchor_itself() -> None:
    a = uniform_unit(50, 8, 1)
    neighbours = anchor_neighbours(a)
    assert neighbours.shape == (50, 10)
    assert not (neighbours == np.arange(50)[:, None]).any()


def test_scale_goals_name_each_miss() -> None:
    def row(recall: float, index_bytes: int, p50: float, bootstrap: float) -> dict[str, float]:
        return {
            "recall@10": recall,
            "index_bytes": index_bytes,
            "p50_ms": p50,
            "bootstrap_s": bootstrap,
        }

    report = {
        "sizes": {
            "100000": {"hnsw": row(1.0, 100, 0.5, 1.0), "hnsw_sq8": row(0.99, 30, 0.5, 1.0)},
            "1000000": {"hnsw": row(1.0, 1000, 0.9, 10.0), "hnsw_sq8": row(0.96, 450, 1.5, 61.0)},
        },
        "filtered": {"hnsw": {"0.1%": {"recall@10": 0.99}, "1.0%": {"recall@10": 0.5}}},
    }
    missed = scale_goals(report)
    assert sorted(m.split(":")[0] for m in missed) == [
        "hnsw filtered 1.0% recall@10",
        "hnsw_sq8 bootstrap s",
        "hnsw_sq8 index memory / hnsw",
        "hnsw_sq8 p50 growth",
        "hnsw_sq8 recall@10",
    ]
    report["sizes"]["1000000"]["hnsw_sq8"] = row(0.98, 300, 0.9, 5.0)
    report["filtered"]["hnsw"]["1.0%"]["recall@10"] = 0.99
    assert scale_goals(report) == []
