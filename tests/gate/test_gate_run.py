"""The gate end to end on a Cranfield slice: passes on the default, fails when degraded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragindex.app import gate_cli
from ragindex.app.cli import main
from ragindex.config import RagIndexSpec
from ragindex.evals.collections import Collection
from ragindex.evals.gate import compare

pytestmark = pytest.mark.slow
ANN_VECTORS = 2_000  # as the slice baseline in conftest.py


def test_baseline_has_every_leg_and_ratio(slice_baseline: dict[str, Any]) -> None:
    quality = slice_baseline["quality"]
    assert set(quality) == {"bm25", "dense", "hybrid", "ann"}
    for leg in ("bm25", "dense", "hybrid"):
        assert 0 < quality[leg]["ndcg@10"] <= 1 and 0 < quality[leg]["recall@100"] <= 1
    assert quality["ann"]["recall@10"] > 0.95
    assert set(slice_baseline["latency_ratios"]) == {"hybrid_over_dense_p50"}
    assert slice_baseline["details"]["hnsw_over_exact_p50"]["ratio"] > 0
    assert slice_baseline["run"]["cores"] and slice_baseline["settings"]["queries"] > 10


def test_degraded_hnsw_fails(
    slice_collection: Collection, slice_dir: Path, slice_baseline: dict[str, Any]
) -> None:
    """efSearch 4 on a graph of degree 4, HNSW forced: the dense check drops and the gate fails."""
    spec = RagIndexSpec.model_validate(
        {"dense": {"exactThreshold": 0, "hnsw": {"efSearch": 4, "m": 4}}}
    )
    degraded = gate_cli.gate_measure(
        slice_collection, spec, slice_dir, ann_vectors=ANN_VECTORS, repeats=1
    )
    violations = compare(slice_baseline, degraded)
    assert "ann recall@10" in {v.name for v in violations}
    assert all(v.kind in ("quality", "latency_ratio") for v in violations)


def test_disabled_leg_fails(
    slice_collection: Collection, slice_dir: Path, slice_baseline: dict[str, Any]
) -> None:
    run = gate_cli.gate_measure(
        slice_collection,
        RagIndexSpec(),
        slice_dir,
        legs=["dense", "hybrid"],
        ann_vectors=500,
        repeats=1,
    )
    names = {v.name for v in compare(slice_baseline, run) if v.kind == "missing"}
    assert names == {"bm25 ndcg@10", "bm25 recall@100"}


def test_cli_exit_codes(
    slice_collection: Collection,
    slice_dir: Path,
    slice_baseline: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--update-baseline` rewrites the file; the default configuration then passes against it
    (exit 0, same quality as the fixture's run), and fails (exit 1) against a better one."""
    monkeypatch.setattr(gate_cli, "resolve_collection", lambda _name: slice_collection)
    monkeypatch.setattr(gate_cli, "GATE_ANN_VECTORS", ANN_VECTORS)
    monkeypatch.setattr(gate_cli, "GATE_REPEATS", 1)
    baseline = tmp_path / "baseline.json"
    common = ["--baseline", str(baseline), "--data-dir", str(slice_dir)]
    assert main(["gate", "--update-baseline", *common]) == 0
    written = json.loads(baseline.read_text())
    assert written["quality"] == slice_baseline["quality"]
    assert written["settings"]["collection"] == slice_collection.name
    assert written["settings"]["ann_vectors"] == ANN_VECTORS
    assert main(["gate", *common]) == 0
    assert "gate passed" in capsys.readouterr().out
    written["quality"]["hybrid"]["ndcg@10"] += 0.05
    baseline.write_text(json.dumps(written))
    assert main(["gate", *common]) == 1
    assert "GATE FAILED" in capsys.readouterr().out


def test_cli_refuses_a_missing_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", "--baseline", str(tmp_path / "none.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
