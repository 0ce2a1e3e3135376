"""The shared percentile and table helpers."""

from __future__ import annotations

import pytest

from ragindex.errors import InvalidInput
from ragindex.measure import markdown_table, percentile, percentiles, text_table


def test_percentiles_interpolate_linearly() -> None:
    assert percentiles([1.0, 2.0, 3.0]) == {"p50_ms": 2.0, "p99_ms": 2.98, "samples": 3}
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentiles([0.12345678], digits=2) == {"p50_ms": 0.12, "p99_ms": 0.12, "samples": 1}


@pytest.mark.parametrize(("samples", "q"), [([], 50), ([1.0], -1), ([1.0], 100.5)])
def test_percentile_refuses_no_samples_and_bad_q(samples: list[float], q: float) -> None:
    with pytest.raises(InvalidInput):
        percentile(samples, q)


def test_text_table_pads_columns_and_checks_widths() -> None:
    assert text_table(["a", "long"], [["xyz", 1], ["b", 22]]) == "a    long\nxyz  1\nb    22"
    with pytest.raises(InvalidInput, match="one cell per header column"):
        text_table(["a", "b"], [["only one"]])


def test_markdown_table() -> None:
    assert markdown_table(["k", "v"], [["x", 1]]) == ["| k | v |", "|---|---|", "| x | 1 |"]
