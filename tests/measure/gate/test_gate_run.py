"""The gate end to end on a Cranfield slice: passes on the default, fails on each regression
it is named for (a worse passage text behind a warm cache, a slower dense search or chunk
fetch, HNSW at a tiny efSearch, a disabled leg).

Slowdowns are injected (mocks inject faults only): a 10 ms sleep in front of a stage that
takes about a millisecond on the slice multiplies its ratio to its floor, far beyond the
gate's +100 %, so these checks do not depend on the box being quiet.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ragindex.app.cli import main
from ragindex.config import RagIndexSpec
from ragindex.ingest import pipeline
from ragindex.measure.evals import Collection
from ragindex.measure.evals import cli as eval_cli
from ragindex.measure.gate import run as gate_run
from ragindex.measure.gate.compare import compare
from ragindex.shards import LogShardReplica

pytestmark = pytest.mark.slow
STAGES = {"embed", "dense", "lexical", "fusion", "fetch"}


def without_latency_ratios(baseline: Path) -> dict[str, Any]:
    """The written baseline with its stage ratios dropped, so a rerun right after it is gated on
    quality alone: one repeat's sub-millisecond ratio can double between two runs seconds apart
    on the shared box (CI saw fetch 0.40 -> 0.84), and the latency gate is tested in this file with
    injected sleeps."""
    written = json.loads(baseline.read_text())
    written["latency_ratios"] = {}
    baseline.write_text(json.dumps(written))
    return written


def test_baseline_has_every_leg_and_stage(slice_baseline: dict[str, Any]) -> None:
    quality = slice_baseline["quality"]
    assert set(quality) == {"bm25", "dense", "hybrid", "dense_hnsw"}
    # the slice's dense leg in HNSW at the default efSearch finds what exact search finds
    assert quality["dense_hnsw"]["recall@10_vs_exact"] >= 0.99
    assert abs(quality["dense_hnsw"]["ndcg@10"] - quality["dense"]["ndcg@10"]) <= 0.005
    assert slice_baseline["details"]["dense_hnsw"]["kinds"] == ["hnsw"]
    assert set(slice_baseline["latency_ratios"]) == {f"{s}_over_floor_p50" for s in STAGES}
    stages = slice_baseline["details"]["stages"]
    for stage in STAGES:
        assert stages[stage]["samples"] == slice_baseline["settings"]["queries"] - 25
    assert slice_baseline["settings"]["index_code"] == eval_cli.index_code_fingerprint()


def _slowed(target: Callable[..., Any]) -> Callable[..., Any]:
    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.010)
        return target(*args, **kwargs)

    return slow


@pytest.mark.parametrize(
    ("owner", "method", "ratio"),
    [
        (LogShardReplica, "search", "dense_over_floor_p50"),
        # a shard replica hands over its top hits' chunks with them: a slow chunk lookup
        # slows the dense leg (the fetch stage then only picks the carried chunks)
        (LogShardReplica, "get_chunks", "dense_over_floor_p50"),
    ],
)
def test_a_10_ms_slower_stage_fails_on_its_own_ratio(
    slice_collection: Collection,
    slice_dir: Path,
    slice_baseline: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    owner: type,
    method: str,
    ratio: str,
) -> None:
    monkeypatch.setattr(owner, method, _slowed(getattr(owner, method)))
    slowed = gate_run.gate_measure(slice_collection, RagIndexSpec(), slice_dir, repeats=1)
    violations = compare(slice_baseline, slowed)
    assert ratio in {v.name for v in violations if v.kind == "latency_ratio"}
    assert slowed["latency_ratios"][ratio] > 3 * slice_baseline["latency_ratios"][ratio]
    assert not [v for v in violations if v.kind != "latency_ratio"]


def test_hnsw_at_ef_search_1_fails(
    slice_collection: Collection, slice_dir: Path, slice_baseline: dict[str, Any]
) -> None:
    """efSearch 1 (honoured, not raised to the search depth) on a graph of degree 4: the dense
    leg rebuilt in HNSW loses to exact search in the same run, and the run is flagged as
    measured on another spec. (The slice's shards hold ~50 vectors, fewer than the search
    depth, so only a sparse graph shows it here; on Cranfield the default M does. The graph
    depends on the order the views apply the log in: at efSearch 4 it lost 0.04-0.05 nDCG@10
    in most builds and less than the gate's 0.005 in one, at 1 it loses ~0.12.)"""
    spec = RagIndexSpec.model_validate({"dense": {"hnsw": {"efSearch": 1, "m": 4}}})
    degraded = gate_run.gate_measure(slice_collection, spec, slice_dir, repeats=1)
    violations = compare(slice_baseline, degraded)
    names = {v.name for v in violations}
    assert "dense_hnsw ndcg@10" in names
    assert {"settings.spec.dense.hnsw.efSearch", "settings.spec.dense.hnsw.m"} <= names
    assert degraded["quality"]["dense_hnsw"]["recall@10_vs_exact"] < 0.95


def test_disabled_leg_fails(
    slice_collection: Collection, slice_dir: Path, slice_baseline: dict[str, Any]
) -> None:
    run = gate_run.gate_measure(
        slice_collection, RagIndexSpec(), slice_dir, legs=["dense", "hybrid"], repeats=1
    )
    names = {v.name for v in compare(slice_baseline, run) if v.kind == "missing"}
    assert names == {"bm25 ndcg@10", "bm25 recall@100"}


def test_worse_passage_text_fails_though_a_warm_cache_is_present(
    slice_collection: Collection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The cached index is keyed by the index-shaping code: after a change to the passage text
    (here: only the first three words are embedded) the gate builds a new index instead of
    measuring the old vectors, and fails on the dense legs."""
    monkeypatch.setenv("RAGINDEX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gate_run, "resolve_collection", lambda _name: slice_collection)
    monkeypatch.setattr(gate_run, "GATE_REPEATS", 1)
    baseline = tmp_path / "baseline.json"
    assert main(["gate", "--update-baseline", "--baseline", str(baseline)]) == 0
    warm = list((tmp_path / "cache" / "eval").iterdir())
    assert len(warm) == 1

    original = pipeline.passage_text
    monkeypatch.setattr(pipeline, "passage_text", lambda c: " ".join(original(c).split()[:3]))
    # what editing ragindex/passages.py does to the fingerprint (its source is not edited here)
    code = eval_cli.index_code_fingerprint()
    monkeypatch.setattr(eval_cli, "index_code_fingerprint", lambda: f"changed-{code}")
    capsys.readouterr()
    assert main(["gate", "--baseline", str(baseline)]) == 1
    out = capsys.readouterr().out
    assert "GATE FAILED" in out and "dense ndcg@10" in out
    assert len(list((tmp_path / "cache" / "eval").iterdir())) == 2  # built anew, beside it


def test_fingerprint_follows_the_source_of_index_shaping_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_collection: Collection
) -> None:
    module = tmp_path / "shaping_probe.py"
    module.write_text("def passage(c):\n    return c\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(eval_cli, "INDEX_SHAPING_MODULES", ("shaping_probe",))
    before = eval_cli.index_code_fingerprint()
    assert eval_cli.index_code_fingerprint() == before
    module.write_text("def passage(c):\n    return c[:3]\n")
    assert eval_cli.index_code_fingerprint() != before
    spec = RagIndexSpec()
    keyed = eval_cli.eval_data_dir(slice_collection, spec)
    module.write_text("def passage(c):\n    return c[:4]\n")
    assert eval_cli.eval_data_dir(slice_collection, spec) != keyed


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
    monkeypatch.setattr(gate_run, "resolve_collection", lambda _name: slice_collection)
    monkeypatch.setattr(gate_run, "GATE_REPEATS", 1)
    baseline = tmp_path / "baseline.json"
    common = ["--baseline", str(baseline), "--data-dir", str(slice_dir)]
    assert main(["gate", "--update-baseline", *common]) == 0
    written = json.loads(baseline.read_text())
    assert written["quality"] == slice_baseline["quality"]
    assert written["settings"]["collection"] == slice_collection.name
    assert written["collections"] == {}  # every other name resolves to the slice itself here
    written = without_latency_ratios(baseline)
    assert main(["gate", *common]) == 0
    assert "gate passed" in capsys.readouterr().out
    written["quality"]["hybrid"]["ndcg@10"] += 0.05
    baseline.write_text(json.dumps(written))
    assert main(["gate", *common]) == 1
    assert "GATE FAILED" in capsys.readouterr().out


def test_every_gated_collection_is_measured_and_each_can_fail_the_gate(
    slice_collection: Collection,
    next_slice: Collection,
    slice_dir: Path,
    slice_baseline: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A second collection (the next Cranfield documents) is gated beside the main one: the
    baseline holds its quality per leg and tolerance, the gate replays it from its own cached
    index and fails naming it when it is worse than its baseline."""
    other = next_slice
    monkeypatch.setenv("RAGINDEX_CACHE", str(tmp_path / "cache"))
    resolved = {slice_collection.name: slice_collection, other.name: other}
    monkeypatch.setattr(gate_run, "resolve_collection", lambda name: resolved[name])
    monkeypatch.setattr(gate_run, "GATE_REPEATS", 1)
    baseline = tmp_path / "baseline.json"
    common = ["--baseline", str(baseline), "--data-dir", str(slice_dir)]
    update = ["gate", "--update-baseline", "--collection", slice_collection.name, *common]
    assert main([*update, "--also", other.name, slice_collection.name]) == 0
    written = json.loads(baseline.read_text())
    assert list(written["collections"]) == [other.name]  # the main one is not gated twice
    entry = written["collections"][other.name]
    assert set(entry["quality"]) == {"bm25", "dense", "hybrid"}
    assert entry["queries"] == len(other.judged_queries()) and entry["quality_drop"] >= 0.01
    assert written["quality"] == slice_baseline["quality"]

    written = without_latency_ratios(baseline)
    entry = written["collections"][other.name]
    gate = ["gate", "--collection", slice_collection.name, *common]
    assert main(gate) == 0
    assert f"{other.name} hybrid ndcg@10" in capsys.readouterr().out
    entry["quality"]["dense"]["ndcg@10"] += entry["quality_drop"] + 0.01
    baseline.write_text(json.dumps(written))
    assert main(gate) == 1
    out = capsys.readouterr().out
    assert f"- {other.name} dense ndcg@10" in out and "- dense ndcg@10" not in out


def test_cli_refuses_a_missing_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", "--baseline", str(tmp_path / "none.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
