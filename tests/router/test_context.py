"""Context assembly: duplicates collapsed, stable ids, grouping, budget, parent sections."""

from __future__ import annotations

import pytest

from ragindex.errors import InvalidInput
from ragindex.router import assemble_context

BASE = (
    "the boundary layer on a flat plate thickens downstream because viscous stresses slow the"
    " fluid near the wall and the momentum deficit spreads outward with distance"
)


def test_overlapping_windows_collapse_into_the_better_ranked(make_hit, count_words):
    first = make_hit("d1", 0, BASE)
    overlap = make_hit("d1", 1, BASE.split(" ", 3)[3] + " until transition occurs")
    other = make_hit("d2", 0, "shock waves form ahead of a blunt body in supersonic flow")
    ctx = assemble_context([first, overlap, other], count_words)
    assert ctx.chunk_ids() == ["docs:d1:0", "docs:d2:0"]
    assert ctx.duplicates == {"docs:d1:1": "docs:d1:0"}
    assert ctx.sources[0].chunks[0].merged == ("docs:d1:1",)


def test_distinct_chunks_of_one_document_share_its_id_in_document_order(make_hit, count_words):
    hits = [
        make_hit("d1", 3, "heat transfer rates were measured at mach 6 in the tunnel"),
        make_hit("d2", 0, "flutter of panels depends on the dynamic pressure"),
        make_hit("d1", 1, "the model was a cone with a hemispherical nose", updated="2024-05-01"),
    ]
    ctx = assemble_context(hits, count_words)
    assert [(s.sid, s.doc_id) for s in ctx.sources] == [(1, "d1"), (2, "d2")]
    assert [c.n for c in ctx.sources[0].chunks] == [1, 3]
    assert ctx.sources[0].label == "[1]"
    assert ctx.sources[0].title == "Title of d1"
    assert ctx.source_of_chunk("docs:d2:0") is ctx.sources[1]


def test_ids_are_stable_for_the_same_hits(make_hit, count_words):
    hits = [make_hit(f"d{i}", 0, f"text number {i} about wing loading {i * 7}") for i in range(5)]
    assert assemble_context(hits, count_words) == assemble_context(list(hits), count_words)


def test_budget_limits_chunks_and_tokens(make_hit, count_words):
    hits = [
        make_hit(f"d{i}", 0, f"distinct sentence {i} " + "word " * 10 + f"w{i}") for i in range(12)
    ]
    ctx = assemble_context(hits, count_words, max_chunks=8)
    assert len(ctx.chunk_ids()) == 8
    assert len(ctx.over_budget) == 4
    small = assemble_context(hits, count_words, max_tokens=30)
    assert small.tokens <= 30
    assert len(small.chunk_ids()) == 2


def test_an_oversized_chunk_is_skipped_and_a_shorter_one_still_fits(make_hit, count_words):
    hits = [
        make_hit("big", 0, "long " * 50 + "end"),
        make_hit("small", 0, "short passage about nozzles"),
    ]
    ctx = assemble_context(hits, count_words, max_tokens=20)
    assert ctx.chunk_ids() == ["docs:small:0"]
    assert ctx.over_budget == ("docs:big:0",)


def test_parent_child_hits_carry_the_parent_section(make_hit, count_words):
    parent = "section 2. " + BASE
    a = make_hit("d1", 4, "viscous stresses slow the fluid", context=parent)
    b = make_hit("d1", 5, "the momentum deficit spreads outward", context=parent)
    ctx = assemble_context([a, b], count_words)
    (chunk,) = ctx.sources[0].chunks
    assert chunk.display_text == parent
    assert chunk.text == "viscous stresses slow the fluid"
    assert ctx.duplicates == {"docs:d1:5": "docs:d1:4"}


def test_bad_budgets_are_rejected(make_hit, count_words):
    hit = make_hit("d1", 0, "text")
    for kwargs in ({"max_chunks": 0}, {"max_tokens": 0}, {"duplicate_threshold": 0.0}):
        with pytest.raises(InvalidInput):
            assemble_context([hit], count_words, **kwargs)
