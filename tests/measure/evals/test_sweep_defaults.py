"""The defaults sweep's decision rule (pure): a setting becomes a default only if it raises the
mean held-out hybrid nDCG@10 over the collections and costs none of them more than 0.005."""

from __future__ import annotations

from typing import Any

from ragindex.config import RagIndexSpec
from ragindex.measure.evals.sweep import (
    INDEX_VARIANTS,
    QUERY_VARIANTS,
    defaults_summary,
    summary_table,
    with_change,
)


def row(collection: str, variant: str, ndcg: float, ms: float = 10.0) -> dict[str, Any]:
    split = {"ndcg@10": ndcg, "recall@100": 0.9}
    hybrid = {"tune": split, "heldout": split, "all": split, "ms_per_query": ms}
    return {"collection": collection, "variant": variant, "hybrid": hybrid}


def verdicts(rows: list[dict[str, Any]]) -> dict[str, bool]:
    return {s["variant"]: s["passes_rule"] for s in defaults_summary(rows)}


def test_a_better_mean_that_costs_no_collection_much_passes() -> None:
    rows = [
        row("a", "default", 0.40),
        row("b", "default", 0.60),
        row("a", "better", 0.42, ms=15.0),
        row("b", "better", 0.596),  # -0.004: within the rule
        row("a", "hurts one", 0.50),
        row("b", "hurts one", 0.594),  # -0.006: one collection pays too much
        row("a", "flat", 0.40),
        row("b", "flat", 0.60),
    ]
    assert verdicts(rows) == {
        "default": False,
        "better": True,
        "hurts one": False,
        "flat": False,
    }
    better = defaults_summary(rows)[1]
    assert better["collections"]["a"]["latency_ratio"] == 1.5
    assert better["mean_ndcg@10"] == 0.508 and better["mean_delta_ndcg@10"] == 0.008
    table = summary_table(defaults_summary(rows))
    cells = "0.420 / 0.900 (x1.50) | 0.596 / 0.900 (x1.00) | 0.508 / 0.900"
    assert f"| better | {cells} | passes |" in table


def test_every_variant_is_a_valid_spec_change() -> None:
    base = RagIndexSpec()
    for label, change in [*INDEX_VARIANTS, *(v for vs in QUERY_VARIANTS.values() for v in vs)]:
        assert label == "default" or with_change(base, change) != base, label
    assert set(QUERY_VARIANTS) <= {label for label, _ in INDEX_VARIANTS}


def test_variants_wait_for_the_default_on_every_collection() -> None:
    """Runs split by variant (one run for the slow embedder, say) summarize nothing until the
    default is measured on every collection they cover."""
    alone = [row("a", "slow model", 0.5), row("b", "slow model", 0.7)]
    assert defaults_summary(alone) == []
    assert "nothing to summarize" in summary_table([])
    half = [*alone, row("a", "default", 0.4)]
    assert defaults_summary(half) == []
    whole = [*half, row("b", "default", 0.6)]
    assert verdicts(whole) == {"slow model": True, "default": False}
