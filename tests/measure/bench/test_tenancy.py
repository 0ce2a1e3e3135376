"""`ragindex bench tenancy`: both embedded BM25 layouts built and queried in one run."""

from __future__ import annotations

from pathlib import Path

from ragindex.measure.bench.tenancy import run_tenancy_bench, spread, tenancy_table
from ragindex.types import Chunk


def test_every_layout_and_tenant_count_is_measured(tmp_path: Path) -> None:
    words = ["wing", "flutter", "nozzle", "shock", "plate", "vortex"]
    chunks = [
        Chunk("t0", f"s:d{i}:0", "s", f"d{i}", 0, "", f"{words[i % 6]} {words[i % 4]} {i}", "")
        for i in range(60)
    ]
    assert {c.tenant_id for c in spread(chunks, 3)} == {"t0", "t1", "t2"}
    result = run_tenancy_bench(chunks, ["wing flutter", "shock"], tmp_path, (2, 5), repeats=1)
    assert set(result["configs"]) == {
        "shared N=2", "index-per-tenant N=2", "shared N=5", "index-per-tenant N=5",
    }  # fmt: skip
    for name, config in result["configs"].items():
        assert config["samples"] == 2 and config["disk_mb"] > 0, name
        assert 0.0 <= config["top10_differs_from_shared"] <= 1.0
    assert result["configs"]["shared N=5"]["top10_differs_from_shared"] == 0.0
    assert "index-per-tenant N=5" in tenancy_table(result)
