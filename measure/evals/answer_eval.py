"""Generation evaluation, kept apart from retrieval (DESIGN.md invariant 6).

Measured against the retrieved context, not against reference answers (none exist for
Cranfield): faithfulness (share of the generator's sentences supported by the source they
cite, before ungrounded ones are removed), citation precision (share of (sentence, cited
source) pairs where that source supports the sentence), the refusal rate on questions the
corpus cannot answer and on ones it can, and answer relevance (share of the question's content
words the answer holds, or MiniLM cosine when an embedder is given). With Cranfield judgments,
`cited_doc_relevance` adds the share of cited chunks whose document is judged relevant.
Support is lexical (see ragindex.router.grounding), so these figures say "the words are in the
cited source", not "the source entails the sentence".

The refusal threshold is calibrated with `calibrate_threshold` on one half of the questions and
reported on the other half, so the refusal rates are not measured on what set the threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, Any

import numpy as np

from ragindex.app import answer_service
from ragindex.errors import InvalidInput
from ragindex.measure.evals.collections import Collection
from ragindex.protocols import Embedder
from ragindex.router import Answer, content_terms, coverage

if TYPE_CHECKING:
    from ragindex.app import EmbeddedIndex

OUT_OF_DOMAIN_QUESTIONS = Path(__file__).parent / "data" / "out_of_domain_questions.txt"


@dataclass(frozen=True)
class AnswerCase:
    qid: str
    question: str
    answerable: bool
    relevant_docs: frozenset[str] = field(default_factory=frozenset)


def cranfield_cases(collection: Collection, limit: int | None = None) -> list[AnswerCase]:
    """Judged queries of a collection as answerable cases, in query order."""
    cases = [
        AnswerCase(
            qid,
            collection.queries[qid].text,
            True,
            frozenset(d for d, g in collection.qrels.get(qid, {}).items() if g > 0),
        )
        for qid in collection.judged_queries()
    ]
    return cases[:limit] if limit is not None else cases


def out_of_domain_cases(path: Path = OUT_OF_DOMAIN_QUESTIONS) -> list[AnswerCase]:
    """Hand-written questions the corpus cannot answer; one per line, '#' starts a comment."""
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    questions = [ln for ln in lines if ln and not ln.startswith("#")]
    if not questions:
        raise InvalidInput(f"{path} holds no questions")
    return [AnswerCase(f"ood-{i}", q, False) for i, q in enumerate(questions, start=1)]


def split_halves(cases: Sequence[AnswerCase]) -> tuple[list[AnswerCase], list[AnswerCase]]:
    """Alternate cases into a calibration half and a test half (deterministic)."""
    return list(cases[0::2]), list(cases[1::2])


def calibrate_threshold(answerable: Iterable[float], unanswerable: Iterable[float]) -> float:
    """The support threshold that best separates the two sets (refused when support <
    threshold): it maximises the unanswerable refusal rate minus the answerable refusal rate
    (Youden's J), placed midway between neighbouring observed values so it sits in the gap
    rather than on a sample. Ties go to the lower threshold (fewer wrong refusals). Pure."""
    pos, neg = sorted(answerable), sorted(unanswerable)
    if not pos or not neg:
        raise InvalidInput(
            "calibration needs support values of both answerable and other questions"
        )
    values = sorted(set(pos) | set(neg))
    cuts = [(lo + hi) / 2 for lo, hi in pairwise(values)] or values

    def j(t: float) -> float:
        return sum(v < t for v in neg) / len(neg) - sum(v < t for v in pos) / len(pos)

    return float(max(cuts, key=lambda t: (j(t), -t)))


def answer_relevance(question: str, text: str, embedder: Embedder | None = None) -> float:
    """Share of question content words in the answer, or their MiniLM cosine."""
    if embedder is None:
        return coverage(content_terms(question), content_terms(text))
    q = np.asarray(embedder.embed_queries([question]), dtype=np.float64)[0]
    a = np.asarray(embedder.embed_passages([text]), dtype=np.float64)[0]
    return float(q @ a / (np.linalg.norm(q) * np.linalg.norm(a) + 1e-12))


def score_answer(
    case: AnswerCase, answer: Answer, embedder: Embedder | None = None
) -> dict[str, Any]:
    """Per-question figures; generation figures are None for refused answers."""
    row: dict[str, Any] = {
        "qid": case.qid,
        "answerable": case.answerable,
        "refused": answer.refused,
        "support": answer.support,
        "flagged_chunks": len(answer.flagged_chunks),
    }
    report = answer.grounding
    if answer.refused or report is None or not report.sentences:
        return row
    n = len(report.sentences)
    row["faithfulness"] = len(report.supported) / n
    row["unverifiable"] = len(report.unverifiable) / n
    row["cited_pairs"] = sum(len(s.cited) for s in report.sentences)
    row["supported_pairs"] = sum(len(s.supporting) for s in report.sentences)
    row["answer_relevance"] = answer_relevance(case.question, answer.answer, embedder)
    if case.relevant_docs and answer.citations:
        doc_of = {cid: src.doc_id for src in answer.sources for cid in src.chunk_ids}
        relevant = sum(doc_of[cid] in case.relevant_docs for cid in answer.citations)
        row["cited_doc_relevance"] = relevant / len(answer.citations)
    return row


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate per-question rows into the report `ragindex eval --answers` prints."""
    ans = [r for r in rows if r["answerable"]]
    una = [r for r in rows if not r["answerable"]]
    gen = [r for r in rows if "faithfulness" in r]
    cited = sum(r["cited_pairs"] for r in gen)

    def avg(key: str, among: Sequence[dict[str, Any]]) -> float | None:
        vals = [r[key] for r in among if r.get(key) is not None]
        return round(mean(vals), 4) if vals else None

    return {
        "answerable_questions": len(ans),
        "unanswerable_questions": len(una),
        "answered": len(gen),
        "faithfulness": avg("faithfulness", gen),
        "citation_precision": (
            round(sum(r["supported_pairs"] for r in gen) / cited, 4) if cited else None
        ),
        "cited_doc_relevance": avg("cited_doc_relevance", gen),
        "unverifiable_rate": avg("unverifiable", gen),
        "answer_relevance": avg("answer_relevance", gen),
        "unanswerable_refusal_rate": (
            round(sum(r["refused"] for r in una) / len(una), 4) if una else None
        ),
        "answerable_refusal_rate": (
            round(sum(r["refused"] for r in ans) / len(ans), 4) if ans else None
        ),
        "flagged_chunks": sum(r["flagged_chunks"] for r in rows),
    }


AnswerFn = Callable[[str], Answer]


def evaluate_answers(
    answer: AnswerFn,
    cases: Sequence[AnswerCase],
    *,
    embedder: Embedder | None = None,
) -> dict[str, Any]:
    """Ask every case through `answer` (e.g. `lambda q: service.answer(tenant, q)`) and
    summarize; the per-question rows come back under "per_question"."""
    if not cases:
        raise InvalidInput("evaluate_answers needs at least one question")
    rows = [score_answer(case, answer(case.question), embedder) for case in cases]
    report = summarize(rows)
    report["per_question"] = rows
    return report


EVAL_TENANT = "default"


def answer_eval(index: EmbeddedIndex, collection: Collection) -> dict[str, Any]:
    """Generation figures on a collection's judged queries plus the out-of-domain set.

    Faithfulness and citation precision come from the answers' own grounding check; the
    refusal rates are reported for answerable and unanswerable questions separately.
    """
    service = answer_service(index.spec, index.query, index.embedder)
    cases = cranfield_cases(collection) + out_of_domain_cases()
    report = evaluate_answers(lambda q: service.answer(EVAL_TENANT, q), cases)
    report.pop("per_question", None)
    return report
