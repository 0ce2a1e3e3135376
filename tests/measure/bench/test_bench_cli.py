"""The bench commands: the JSON they write (shape and run description), on small inputs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.measure.bench.bm25 import bm25_table
from ragindex.measure.bench.cli import bench_filtered_command, bm25_bench
from ragindex.measure.evals import Collection
from ragindex.measure.servers import EsServer


def test_filtered_command_writes_shares_and_what_it_ran_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out" / "filtered.json"
    args = argparse.Namespace(vectors=2000, json=out, acl=False, metadata=False, queries=200)
    assert bench_filtered_command(args) == 0
    data = json.loads(out.read_text())
    assert list(data) == ["0.001", "0.01", "0.1", "0.5", "run"]
    assert data["0.001"]["vectors"] == 2 and data["0.5"]["vectors"] == 1000
    for share in ("0.001", "0.01", "0.1", "0.5"):
        # under the default exact threshold every tenant is searched exactly: recall is exact
        assert data[share]["search"] == "flat" and data[share]["recall@10"] == 1.0
        assert data[share]["samples"] == 200 and data[share]["p50_ms"] > 0
    run = data["run"]
    assert (run["vectors"], run["dim"], run["queries"], run["exact_threshold"]) == (
        2000,
        384,
        200,
        20_000,
    )
    assert run["cores"] >= 1 and run["faiss_threads"] >= 1 and "OMP_NUM_THREADS" in run
    printed = capsys.readouterr().out
    assert "recall@10" in printed and "0.001" in printed


def test_filtered_command_with_a_low_exact_threshold_checks_recall_in_hnsw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "filtered.json"
    args = argparse.Namespace(
        vectors=2000, json=out, acl=False, metadata=False, queries=30, exact_threshold=300,
        check=True,
    )  # fmt: skip
    assert bench_filtered_command(args) == 0  # --check: every share met its recall goal
    data = json.loads(out.read_text())
    assert data["run"]["exact_threshold"] == 300
    assert (data["0.1"]["search"], data["0.5"]["search"]) == ("flat", "hnsw")
    assert data["0.5"]["recall@10"] >= 0.95
    assert "missed goal" not in capsys.readouterr().out
    args.exact_threshold, args.json = -1, tmp_path / "refused.json"
    with pytest.raises(InvalidInput, match="--exact-threshold must be >= 0"):
        bench_filtered_command(args)
    assert not args.json.exists()


def test_filtered_acl_command_writes_every_share_beside_the_unfiltered_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "acl.json"
    args = argparse.Namespace(vectors=3000, json=out, acl=True, metadata=False, queries=20)
    assert bench_filtered_command(args) == 0
    data = json.loads(out.read_text())
    assert list(data) == ["unfiltered", "0.001", "0.01", "0.1", "0.5", "1.0", "run"]
    assert [data[s]["allowed"] for s in ("0.001", "0.01", "0.5", "1.0")] == [3, 30, 1500, 3000]
    for share in ("unfiltered", "0.001", "0.01", "0.1", "0.5", "1.0"):
        assert data[share]["recall@10"] >= 0.98 and data[share]["p50_ms"] > 0
    assert "unfiltered" in capsys.readouterr().out


@pytest.mark.elasticsearch
@pytest.mark.slow
def test_bm25_bench_on_a_real_elasticsearch(
    tmp_path: Path, tiny: Collection, es_server: EsServer
) -> None:
    result = bm25_bench(
        tiny, tmp_path / "engine", es_server.url, RagIndexSpec(), repeats=1, warmup=1
    )
    assert result["chunks"] == 6 and result["queries"] == 3
    for leg in ("bm25", "hybrid"):
        for backend in ("tantivy", "elasticsearch"):
            assert result[leg][backend]["samples"] == 2  # 3 queries, the first a warm-up
    assert result["bm25_ndcg@10_abs_diff"] < 0.01
    assert result["hybrid"]["elasticsearch"]["ndcg@10"] == pytest.approx(
        result["hybrid"]["tantivy"]["ndcg@10"], abs=0.01
    )
    assert result["run"]["cores"] >= 1 and "elasticsearch" in bm25_table(result)
