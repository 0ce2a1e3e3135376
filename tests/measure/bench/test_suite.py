"""The suite's runners on tiny inputs: the efSearch sweep, stage ratios, and the command's
exit status when a section fails."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ragindex.app import EmbeddedIndex
from ragindex.config import DenseSpec, RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.measure import docs
from ragindex.measure.bench import suite as bs
from ragindex.measure.bench import suite_cli
from ragindex.protocols import Embedder
from ragindex.types import Document


def test_ef_sweep_honours_ef_search_and_times_only_fresh_queries() -> None:
    vectors, queries = bs.synthetic_vectors(3_000, 40, dim=32, seed=3)
    dense = DenseSpec.model_validate({"shards": 1, "hnsw": {"m": 8, "efConstruction": 40}})
    sweep = bs.ef_sweep(vectors, queries, dense, ef_values=(1, 4, 256))
    recall = {p["ef_search"]: p["recall@10"] for p in sweep["points"]}
    # efSearch below k is not raised to k: the ef 1 and ef 4 rows are different searches
    assert recall[1] < recall[4] < recall[256]
    assert recall[256] > 0.9 and sweep["exact"]["recall@10"] == 1.0
    assert sweep["queries"] == 30 and sweep["warmup_queries"] == bs.WARMUP_QUERIES
    assert all(p["samples"] == 30 for p in sweep["points"])
    with pytest.raises(InvalidInput, match="warm-up"):
        bs.ef_sweep(vectors, queries[: bs.WARMUP_QUERIES], dense, ef_values=(8,))


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, minilm: Embedder) -> Iterator[EmbeddedIndex]:
    eng = EmbeddedIndex(tmp_path_factory.mktemp("stages"), RagIndexSpec(), embedder=minilm)
    words = [
        "lift",
        "drag",
        "wing",
        "shock",
        "wave",
        "boundary",
        "layer",
        "heat",
        "flutter",
        "panel",
        "cone",
        "shell",
    ]
    docs = [Document("s", str(i), "", " ".join(np.roll(words, i)[:6])) for i in range(12)]
    eng.upsert("default", docs)
    yield eng
    eng.close()


def test_stage_ratios_time_each_stage_against_its_floor(engine: EmbeddedIndex) -> None:
    seen: list[str] = []

    def floor(query: str, vector: object, result: object) -> None:
        seen.append(query)
        time.sleep(0.001)  # a floor of a known size, so the rounding of its p50 is negligible

    queries = [f"wing shock {i}" for i in range(8)]
    out = bs.stage_ratios(engine.query, "default", queries, {"dense": floor}, repeats=2, warmup=3)
    assert set(out) == {"dense"} and out["dense"]["samples"] == 2 * 5
    assert out["dense"]["ratio"] == pytest.approx(
        out["dense"]["stage_p50_ms"] / out["dense"]["floor_p50_ms"], rel=0.01
    )
    assert seen[:3] == queries[:3] and seen[3:8] == queries[3:]  # warm-up, then timed
    with pytest.raises(InvalidInput, match="warm-up"):
        bs.stage_ratios(engine.query, "default", queries[:3], {"dense": floor}, warmup=3)


def test_suite_exits_1_when_a_section_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_args: object) -> dict[str, object]:
        raise RuntimeError("injected")

    monkeypatch.setattr(suite_cli, "_query_path", broken)
    monkeypatch.setattr(suite_cli, "resolve_collection", lambda _name: None)
    out = tmp_path / "suite.json"
    args = argparse.Namespace(
        json=out, plots=tmp_path / "img", vectors=600, skip=["es", "serve"], threads=1
    )
    assert suite_cli.bench_suite_command(args) == 1
    suite = json.loads(out.read_text())
    assert suite["query_path"] == {"error": "RuntimeError: injected"}
    assert suite["dense_curve"]["vectors"] == 600 and "points" in suite["dense_curve"]
    assert suite["run"]["command"] == [
        "ragindex", "bench", "suite", "--json", str(out), "--plots", str(tmp_path / "img"),
        "--vectors", "600", "--threads", "1", "--skip", "es", "--skip", "serve",
    ]  # fmt: skip
    assert "SUITE FAILED" in capsys.readouterr().out


def test_suite_reruns_one_section_into_its_json_with_the_same_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragindex.measure.bench import filtered as bench_filtered

    monkeypatch.setattr(suite_cli, "_query_path", lambda *_args: {})
    monkeypatch.setattr(suite_cli, "resolve_collection", lambda _name: None)
    out = tmp_path / "suite.json"
    common = {"json": out, "plots": tmp_path / "img", "skip": ["es", "serve"], "threads": 1}
    first = argparse.Namespace(vectors=600, **common)
    assert suite_cli.bench_suite_command(first) == 0
    before = json.loads(out.read_text())
    assert before["filtered"]["0.5"]["recall@10"] == 1.0  # 300 vectors: searched exactly

    poor = {"0.5": {"recall@10": 0.5, "vectors": 300, "search": "hnsw", "p50_ms": 1, "p99_ms": 2}}
    monkeypatch.setattr(bench_filtered, "run_filtered_bench", lambda **_kw: poor)
    rerun = argparse.Namespace(vectors=600, only=["filtered"], check=True, **common)
    assert suite_cli.bench_suite_command(rerun) == 1  # --check: the rerun section misses a goal
    assert "missed goal: filtered 0.5 recall@10: 0.5 misses the goal >= 0.95" in (
        capsys.readouterr().out
    )
    after = json.loads(out.read_text())
    assert after["filtered"] == poor and after["dense_curve"] == before["dense_curve"]
    assert after["run"]["command"] == before["run"]["command"]
    assert [r["sections"] for r in after["run"]["reruns"]] == [["filtered"]]
    assert after["run"]["reruns"][0]["command"][-2:] == ["--only", "filtered"]
    page = docs.render_markdown(after, None, out, tmp_path)
    assert "Rerun alone since, with the same options, in" in page and ": filtered (`" in page

    other = argparse.Namespace(vectors=800, only=["filtered"], **common)
    with pytest.raises(InvalidInput, match="same options"):
        suite_cli.bench_suite_command(other)
    assert json.loads(out.read_text()) == after  # refused: nothing rewritten


def test_suite_check_holds_every_sections_goals() -> None:
    suite = {
        "filtered": {"0.01": {"recall@10": 1.0}, "0.5": {"recall@10": 0.9}},
        "peers": {"bm25": {"bm25": {}, "bm25_ndcg@10_abs_diff": 0.02}},
        "serve": {"missed_goals": ["ratio_p50: 1.7 misses the goal <= 1.5"]},
    }
    assert suite_cli.suite_missed_goals(suite) == [
        "filtered 0.5 recall@10: 0.9 misses the goal >= 0.95",
        "peers.bm25 bm25_ndcg@10_abs_diff: 0.02 misses the goal <= 0.01",
        "serve ratio_p50: 1.7 misses the goal <= 1.5",
    ]
    assert suite_cli.suite_missed_goals({"filtered": {"run": {}}}) == []
