"""The shared percentile and table helpers."""

from __future__ import annotations

import numpy as np
import pytest

from ragindex.errors import InvalidInput
from ragindex.measure.stats import markdown_table, percentile, percentiles, split_warmup, text_table


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


def test_split_warmup_keeps_the_warm_up_out_of_the_timed_set() -> None:
    assert split_warmup(["a", "b", "c"], 1) == (["a"], ["b", "c"])
    warm, timed = split_warmup(np.arange(12).reshape(12, 1))
    assert warm.ravel().tolist() == list(range(10)) and timed.ravel().tolist() == [10, 11]
    with pytest.raises(InvalidInput, match=r"more than 2 queries \(the warm-up\), got 2"):
        split_warmup(["a", "b"], 2)
    with pytest.raises(InvalidInput, match="warm-up must be >= 0"):
        split_warmup(["a"], -1)
