"""Generation metrics: calibration, per-question scoring and the summary report."""

from __future__ import annotations

import pytest

from ragindex.errors import InvalidInput
from ragindex.measure.evals import (
    AnswerCase,
    calibrate_threshold,
    evaluate_answers,
    out_of_domain_cases,
    split_halves,
)
from ragindex.router import Answer, SourceRef, assemble_context, check_answer
from ragindex.router.prompt import NO_ANSWER

TEXT = "panel flutter boundaries were lowered by aerodynamic heating at supersonic speeds"


def test_calibration_sits_in_the_gap_between_the_sets():
    answerable = [0.45, 0.5, 0.6, 0.7, 0.8]
    unanswerable = [0.1, 0.2, 0.3, 0.35]
    assert calibrate_threshold(answerable, unanswerable) == pytest.approx(0.4)
    # overlapping sets: the cut maximising (ood refused - answerable refused)
    threshold = calibrate_threshold([0.3, 0.6, 0.7, 0.8], [0.1, 0.2, 0.4, 0.9])
    assert threshold == pytest.approx(0.25)
    with pytest.raises(InvalidInput):
        calibrate_threshold([], [0.1])


def test_out_of_domain_file_and_halves():
    cases = out_of_domain_cases()
    assert 40 <= len(cases) <= 60 and not any(c.answerable for c in cases)
    cal, test = split_halves(cases)
    assert len(cal) + len(test) == len(cases) and not set(cal) & set(test)


def answer_for(make_hit, count_words, text: str, refused: bool) -> Answer:
    ctx = assemble_context([make_hit("7", 0, TEXT), make_hit("8", 0, "jet noise")], count_words)
    report = check_answer(text, ctx)
    return Answer(
        question="q",
        answer=NO_ANSWER if refused else text,
        citations=report.citations,
        sources=[
            SourceRef(s.sid, s.source, s.doc_id, s.title, None, [c.chunk_id for c in s.chunks])
            for s in ctx.sources
        ],
        refused=refused,
        refusal_reason=None,
        support=0.5,
        support_signal="lexical",
        flagged_chunks=[],
        unsupported_sentences=[],
        unverifiable_sentences=[],
        generator="test",
        grounding=None if refused else report,
    )


def test_report_figures(make_hit, count_words):
    replies = {
        "what lowers panel flutter boundaries": answer_for(
            make_hit,
            count_words,
            "Aerodynamic heating lowered panel flutter boundaries [1][2]. The moon is cheese [1].",
            refused=False,
        ),
        "how long to boil an egg": answer_for(make_hit, count_words, "", refused=True),
        "why is the sky blue": answer_for(make_hit, count_words, "x", refused=False),
    }
    cases = [
        AnswerCase("1", "what lowers panel flutter boundaries", True, frozenset({"7"})),
        AnswerCase("o1", "how long to boil an egg", False),
        AnswerCase("o2", "why is the sky blue", False),
    ]
    report = evaluate_answers(replies.__getitem__, cases)
    assert report["faithfulness"] == 0.25  # mean of 1/2 and 0/1 (an uncited "x")
    assert report["citation_precision"] == pytest.approx(1 / 3, abs=1e-3)  # [1] yes, [2] no, [1] no
    assert report["cited_doc_relevance"] == 1.0
    assert report["unanswerable_refusal_rate"] == 0.5
    assert report["answerable_refusal_rate"] == 0.0
    # question 1's four content words (lowers ~ lowered) are all in its answer; "sky" and
    # "blue" are not in "x": the mean over the two answered questions is 1/2
    assert report["answer_relevance"] == 0.5
    assert [r["qid"] for r in report["per_question"]] == ["1", "o1", "o2"]
    with pytest.raises(InvalidInput):
        evaluate_answers(replies.__getitem__, [])
