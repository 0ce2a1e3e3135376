"""Metrics agree with trec_eval (pytrec_eval) and ir_measures on the same runs."""

from __future__ import annotations

import math

import ir_measures
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st
from ir_measures import RR, P, R, nDCG

from ragindex.errors import InvalidInput
from ragindex.measure.evals.metrics import (
    mean_scores,
    mrr_at_k,
    ndcg_at_k,
    parse_metric,
    precision_at_k,
    recall_at_k,
    score_query,
)

TOL = 1e-9
CUTOFFS = (1, 3, 5, 10, 20)
POOL = [f"d{i}" for i in range(25)]


def test_hand_computed_example() -> None:
    qrels = {"a": 2, "b": 0, "c": -1, "d": 1}
    ranked = ["c", "a", "z"]
    assert recall_at_k(ranked, qrels, 10) == 0.5
    assert precision_at_k(ranked, qrels, 10) == pytest.approx(0.1)
    assert mrr_at_k(ranked, qrels, 10) == 0.5
    assert mrr_at_k(ranked, qrels, 1) == 0.0
    idcg = 2 + 1 / math.log2(3)
    assert ndcg_at_k(ranked, qrels, 10) == pytest.approx((2 / math.log2(3)) / idcg, abs=TOL)


def test_query_without_relevant_documents_scores_zero() -> None:
    for fn in (recall_at_k, precision_at_k, mrr_at_k, ndcg_at_k):
        assert fn(["a"], {"a": 0}, 10) == 0.0


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "10"])
def test_bad_cutoff_is_rejected(k: object) -> None:
    with pytest.raises(InvalidInput, match="cutoff k"):
        ndcg_at_k(["a"], {"a": 1}, k)


def test_repeated_document_is_rejected() -> None:
    with pytest.raises(InvalidInput, match="repeats a document id"):
        recall_at_k(["a", "b", "a"], {"a": 1}, 10)


@pytest.mark.parametrize("name", ["ndcg", "ndcg@0", "map@10", "ndcg@x", "p@-1"])
def test_unknown_metric_name_is_rejected(name: str) -> None:
    with pytest.raises(InvalidInput, match="unknown metric"):
        parse_metric(name)


def test_mean_needs_queries_with_the_same_metrics() -> None:
    with pytest.raises(InvalidInput, match="zero queries"):
        mean_scores([])
    with pytest.raises(InvalidInput, match="same metrics"):
        mean_scores([{"p@10": 1.0}, {"ndcg@10": 1.0}])
    assert mean_scores([{"p@10": 1.0}, {"p@10": 0.0}]) == {"p@10": 0.5}


queries_strategy = st.dictionaries(
    keys=st.sampled_from([f"q{i}" for i in range(6)]),
    values=st.tuples(
        # judgments: doc -> gain, including non-relevant (0) and negative gains
        st.dictionaries(st.sampled_from(POOL), st.integers(-1, 4), min_size=1, max_size=12),
        # the ranked run: distinct docs, judged or not
        st.lists(st.sampled_from(POOL), unique=True, max_size=25),
    ),
    min_size=1,
)


def _run_dict(ranked: list[str]) -> dict[str, float]:
    # strictly decreasing scores so trec_eval keeps our order (it sorts by score)
    return {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)}


@settings(max_examples=150, deadline=None)
@given(queries_strategy)
def test_agrees_with_pytrec_eval(data: dict[str, tuple[dict[str, int], list[str]]]) -> None:
    qrels = {qid: judged for qid, (judged, _) in data.items()}
    run = {qid: _run_dict(ranked) for qid, (_, ranked) in data.items()}
    names = {f"{m}.{k}" for m in ("ndcg_cut", "P", "recall") for k in CUTOFFS}
    reference = pytrec_eval.RelevanceEvaluator(qrels, names).evaluate(run)
    for qid, (judged, ranked) in data.items():
        ref = reference[qid]
        for k in CUTOFFS:
            assert ndcg_at_k(ranked, judged, k) == pytest.approx(ref[f"ndcg_cut_{k}"], abs=TOL)
            assert precision_at_k(ranked, judged, k) == pytest.approx(ref[f"P_{k}"], abs=TOL)
            assert recall_at_k(ranked, judged, k) == pytest.approx(ref[f"recall_{k}"], abs=TOL)


@settings(max_examples=150, deadline=None)
@given(queries_strategy)
def test_agrees_with_ir_measures(data: dict[str, tuple[dict[str, int], list[str]]]) -> None:
    qrels = {qid: judged for qid, (judged, _) in data.items()}
    run = {qid: _run_dict(ranked) for qid, (_, ranked) in data.items()}
    measures = [nDCG @ 10, R @ 100, RR @ 10, P @ 10, RR @ 3, nDCG @ 5]
    ours_names = ["ndcg@10", "recall@100", "mrr@10", "p@10", "mrr@3", "ndcg@5"]
    per_query = {
        qid: score_query(ranked, judged, ours_names) for qid, (judged, ranked) in data.items()
    }
    for m in ir_measures.iter_calc(measures, qrels, run):
        ours = per_query[m.query_id][ours_names[measures.index(m.measure)]]
        assert ours == pytest.approx(m.value, abs=TOL)
    aggregate = ir_measures.calc_aggregate(measures, qrels, run)
    means = mean_scores(per_query.values())
    for measure, name in zip(measures, ours_names, strict=True):
        assert means[name] == pytest.approx(aggregate[measure], abs=TOL)
