import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragindex.fusion import reciprocal_rank_fusion


def test_rrf_scores_are_one_over_k_plus_one_based_rank():
    fused = reciprocal_rank_fusion({"dense": ["a", "b"], "lexical": ["b", "c"]}, k=60)
    by_id = {f.chunk_id: f for f in fused}
    assert by_id["a"].score == pytest.approx(1 / 61)
    assert by_id["b"].score == pytest.approx(1 / 62 + 1 / 61)
    assert by_id["c"].score == pytest.approx(1 / 62)
    assert [f.chunk_id for f in fused] == ["b", "a", "c"]
    assert by_id["b"].ranks == {"dense": 2, "lexical": 1}


def test_rrf_ignores_raw_scores_only_ranks_matter():
    # Same ranks, any scores: fusion never sees scores, so a leg with huge BM25 values
    # cannot dominate.
    one = reciprocal_rank_fusion({"dense": ["x", "y"], "lexical": ["y", "x"]})
    assert one[0].score == one[1].score
    assert [f.chunk_id for f in one] == ["x", "y"]  # ties broken by id


def test_duplicate_ids_in_a_leg_count_once_at_best_rank():
    fused = reciprocal_rank_fusion({"dense": ["a", "a", "b"]}, k=60)
    assert fused[0].ranks == {"dense": 1}
    assert fused[0].score == pytest.approx(1 / 61)


def test_negative_k_is_refused():
    with pytest.raises(ValueError):
        reciprocal_rank_fusion({"dense": ["a"]}, k=-1)


@given(
    st.dictionaries(
        st.sampled_from(["dense", "lexical"]),
        st.lists(st.text(min_size=1, max_size=3), max_size=20, unique=True),
    )
)
def test_rrf_output_is_sorted_and_covers_every_id(legs):
    fused = reciprocal_rank_fusion(legs)
    assert {f.chunk_id for f in fused} == {cid for ids in legs.values() for cid in ids}
    scores = [f.score for f in fused]
    assert scores == sorted(scores, reverse=True)


@given(
    st.dictionaries(
        st.sampled_from(["dense", "lexical"]),
        st.lists(st.text(min_size=1, max_size=2), max_size=20, unique=True),
    ),
    st.integers(min_value=0, max_value=25),
)
def test_rrf_top_is_the_head_of_the_whole_fused_list(legs, top):
    assert reciprocal_rank_fusion(legs, top=top) == reciprocal_rank_fusion(legs)[:top]


def test_rrf_refuses_a_negative_top():
    with pytest.raises(ValueError, match="top must be >= 0"):
        reciprocal_rank_fusion({"dense": ["a"]}, top=-1)


def test_weights_scale_a_legs_rank_contribution_only():
    legs = {"dense": ["a", "b"], "lexical": ["b", "a"]}
    fused = reciprocal_rank_fusion(legs, k=60, weights={"dense": 2.0, "lexical": 1.0})
    by_id = {f.chunk_id: f for f in fused}
    assert by_id["a"].score == pytest.approx(2 / 61 + 1 / 62)
    assert [f.chunk_id for f in fused] == ["a", "b"]
    plain = reciprocal_rank_fusion(legs, k=60)
    assert reciprocal_rank_fusion(legs, k=60, weights={"dense": 1.0}) == plain
    assert reciprocal_rank_fusion(legs, k=60, weights={"absent": 3.0}) == plain


def test_a_leg_of_weight_zero_is_left_out():
    fused = reciprocal_rank_fusion(
        {"dense": ["a"], "lexical": ["b", "a"]}, weights={"lexical": 0.0}
    )
    assert [(f.chunk_id, f.ranks) for f in fused] == [("a", {"dense": 1})]
    with pytest.raises(ValueError):
        reciprocal_rank_fusion({"dense": ["a"]}, weights={"dense": -1.0})
