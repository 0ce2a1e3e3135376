"""Groundedness: sentences checked against the chunks they cite (lexical support)."""

from __future__ import annotations

from ragindex.router import assemble_context, check_answer, content_terms
from ragindex.router.grounding import parse_citations, split_sentences

A = "the transition reynolds number on the cone increased with nose bluntness in the tunnel tests"
B = "panel flutter boundaries were lowered by aerodynamic heating at supersonic speeds"


def ctx(make_hit, count_words):
    return assemble_context([make_hit("a", 0, A), make_hit("b", 0, B)], count_words)


def test_split_keeps_trailing_citations_with_their_sentence():
    text = "Lift rises with incidence. [1] Drag falls [2][3]. Uncited claim here!"
    assert split_sentences(text) == [
        "Lift rises with incidence. [1]",
        "Drag falls [2][3].",
        "Uncited claim here!",
    ]
    assert parse_citations("Drag falls [2, 3][2].") == ("Drag falls.", [2, 3])


def test_content_terms_drop_stopwords_and_fold_plurals():
    assert content_terms("The flows were heated in the tunnels") == ["flow", "heat", "tunnel"]


def test_supported_unsupported_and_unverifiable(make_hit, count_words):
    c = ctx(make_hit, count_words)
    report = check_answer(
        "Nose bluntness increased the transition Reynolds number on the cone [1]. "
        "Aerodynamic heating lowered panel flutter boundaries [1]. "
        "Flutter boundaries were lowered by heating [2]. "
        "The moon is made of cheese [2]. "
        "This is an uncited remark about cones.",
        c,
    )
    assert [s.status for s in report.sentences] == [
        "supported",
        "unsupported",
        "supported",
        "unsupported",
        "unverifiable",
    ]
    assert report.citations == ["docs:a:0", "docs:b:0"]
    assert report.citation_precision == 2 / 4


def test_padding_citations_lowers_precision(make_hit, count_words):
    c = ctx(make_hit, count_words)
    report = check_answer("Panel flutter boundaries were lowered by aerodynamic heating [1][2].", c)
    assert report.sentences[0].status == "supported"
    assert report.sentences[0].supporting == (2,)
    assert report.citation_precision == 0.5


def test_unknown_ids_and_excluded_chunks_never_support(make_hit, count_words):
    c = ctx(make_hit, count_words)
    (s,) = check_answer("Panel flutter boundaries were lowered by heating [7].", c).sentences
    assert s.status == "unsupported" and "unknown" in s.reason
    (s,) = check_answer(
        "Panel flutter boundaries were lowered by heating [2].", c, excluded_chunks={"docs:b:0"}
    ).sentences
    assert s.status == "unsupported"


def test_a_huge_citation_number_is_text_not_a_crash():
    # int() refuses > 4300 digits: "[<5000 digits>]" in a model's output raised ValueError.
    huge = "[" + "7" * 5000 + "]"
    clean, ids = parse_citations(f"Lift rises {huge} [2].")
    assert ids == [2] and huge in clean
    assert split_sentences(f"Lift rises. {huge} Drag falls [1].")[1].startswith(huge)
