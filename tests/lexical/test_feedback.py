"""RM3 feedback (pure parts) and fielded BM25 on a real tantivy index."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ragindex.config import Rm3Spec
from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.lexical import FieldBoosts, TantivyIndex
from ragindex.lexical.documents import field_clauses, query_terms
from ragindex.lexical.feedback import pick_feedback, rm3_expand
from ragindex.types import Chunk, ScoredId

MakeChunk = Callable[..., Chunk]


def ids(hits: list[ScoredId]) -> list[str]:
    return [h.chunk_id for h in hits]


def test_query_terms_count_repeats_and_clauses_carry_boosts() -> None:
    terms = query_terms("Wing wing flutter")
    assert terms == {"wing": 2, "flutter": 1}
    clauses = field_clauses(terms, FieldBoosts(title=2.0, body=0.5))
    assert sorted(clauses) == [
        ("body", "flutter", 0.5),
        ("body", "wing", 1.0),
        ("title", "flutter", 2.0),
        ("title", "wing", 4.0),
    ]
    assert {f for f, _, _ in field_clauses(terms, FieldBoosts(title=0.0))} == {"body"}
    with pytest.raises(InvalidInput):
        FieldBoosts(title=0.0, body=0.0)


def test_rm3_interpolates_and_skips_stop_words() -> None:
    feedback = [
        (2.0, ["the", "flutter", "of", "panels", "panels"]),
        (1.0, ["panels", "divergence", "a", "x", "12"]),
    ]
    expanded = rm3_expand({"flutter": 1.0}, feedback, terms=2, original_weight=0.6)
    # P(t|R) before the cut: panels 2*2/5 + 1/5 = 1.0, flutter 2/5 = 0.4, divergence 0.2.
    assert set(expanded) == {"flutter", "panels"}
    assert expanded["panels"] == pytest.approx(0.4 * 1.0 / 1.4)
    assert expanded["flutter"] == pytest.approx(0.6 + 0.4 * 0.4 / 1.4)
    assert sum(expanded.values()) == pytest.approx(1.0)
    # No usable feedback term: the original query, normalised.
    assert rm3_expand({"a": 1.0, "b": 3.0}, [(1.0, ["the", "of"])], 5, 0.5) == {
        "a": 0.25,
        "b": 0.75,
    }


def test_feedback_cut_orders_near_ties_by_chunk_id() -> None:
    hits = [
        (ScoredId(c, s), "") for c, s in [("z", 5.0), ("c", 3.0), ("b", 3.0 + 1e-7), ("a", 1.0)]
    ]
    assert [h.chunk_id for h, _ in pick_feedback(hits, 2)] == ["z", "b"]
    assert [h.chunk_id for h, _ in pick_feedback(hits[:1] + hits[2:3] + hits[1:2], 2)] == ["z", "b"]


def test_title_boost_reorders_and_zero_ignores_titles(
    tmp_path: Path, make_chunk: MakeChunk
) -> None:
    chunks = [
        make_chunk("t", "s:t:0", "a study of heating and drag", title="Heat transfer"),
        make_chunk("t", "s:b:0", "heat heat transfer in nozzles", title="Nozzles"),
        make_chunk("t", "s:o:0", "unrelated body", title="heat"),
    ]
    writer = TantivyIndex.open(tmp_path / "bm25")
    writer.upsert(chunks)
    try:
        boosted = TantivyIndex.open(tmp_path / "bm25", read_only=True, boosts=FieldBoosts(5.0, 1))
        body_only = TantivyIndex.open(tmp_path / "bm25", read_only=True, boosts=FieldBoosts(0, 1))
        assert ids(boosted.search("heat transfer", 3, "t"))[0] == "s:t:0"
        assert ids(body_only.search("heat transfer", 3, "t")) == ["s:b:0"]
        # A field's score is multiplied by its boost: doubling both doubles every score.
        one = writer.search("heat transfer", 3, "t")
        two = TantivyIndex.open(tmp_path / "bm25", read_only=True, boosts=FieldBoosts(2, 2))
        doubled = two.search("heat transfer", 3, "t")
        assert ids(doubled) == ids(one)
        assert [h.score for h in doubled] == pytest.approx([2 * h.score for h in one], rel=1e-5)
    finally:
        writer.close()


def test_rm3_finds_a_chunk_that_shares_no_query_term(tmp_path: Path, make_chunk: MakeChunk) -> None:
    chunks = [
        make_chunk("t", f"s:f:{i}", f"panel flutter and aeroelastic divergence case {i}")
        for i in range(3)
    ]
    chunks += [
        make_chunk("t", "s:x:0", "aeroelastic divergence of swept wings"),
        make_chunk("t", "s:y:0", "boundary layer transition"),
        make_chunk("u", "s:z:0", "aeroelastic divergence aeroelastic divergence"),  # other tenant
    ]
    plain = TantivyIndex.open(tmp_path / "bm25")
    plain.upsert(chunks)
    try:
        rm3 = Rm3Spec(enabled=True, docs=3, terms=5, original_weight=0.5)
        expanding = TantivyIndex.open(tmp_path / "bm25", read_only=True, rm3=rm3)
        assert "s:x:0" not in ids(plain.search("panel flutter", 10, "t"))
        found = ids(expanding.search("panel flutter", 10, "t"))
        assert found[:3] == ids(plain.search("panel flutter", 3, "t"))
        assert "s:x:0" in found and "s:y:0" not in found and "s:z:0" not in found
        assert expanding.search("...", 10, "t") == []
    finally:
        plain.close()


def test_an_index_from_before_the_title_field_is_refused(tmp_path: Path) -> None:
    index = TantivyIndex.open(tmp_path / "bm25")
    index.close()
    meta_path = tmp_path / "bm25" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["schema"] = [f for f in meta["schema"] if f["name"] not in ("title", "body")]
    meta["schema"].append({**meta["schema"][0], "name": "text"})
    meta_path.write_text(json.dumps(meta))
    for read_only in (False, True):
        with pytest.raises(BackendUnavailable, match="older ragindex"):
            TantivyIndex.open(tmp_path / "bm25", read_only=read_only)
