"""ragindex.measure.evals: judged collections, retrieval metrics, `ragindex eval`, the quality sweep
and the answer evaluation.

- `Collection`, `load_collection`, `load_cranfield`, `load_beir`: judged collections;
- `evaluate_answers`, `calibrate_threshold`, `split_halves`, `cranfield_cases`,
  `out_of_domain_cases`, `AnswerCase`: the answer evaluation (`answer_eval`).
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.measure.evals.answer_eval import (
        AnswerCase,
        calibrate_threshold,
        cranfield_cases,
        evaluate_answers,
        out_of_domain_cases,
        split_halves,
    )
    from ragindex.measure.evals.collections import (
        Collection,
        load_beir,
        load_collection,
        load_cranfield,
    )

__all__ = [
    "AnswerCase",
    "Collection",
    "calibrate_threshold",
    "cranfield_cases",
    "evaluate_answers",
    "load_beir",
    "load_collection",
    "load_cranfield",
    "out_of_domain_cases",
    "split_halves",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "answer_eval": [
                "AnswerCase",
                "calibrate_threshold",
                "cranfield_cases",
                "evaluate_answers",
                "out_of_domain_cases",
                "split_halves",
            ],
            "collections": ["Collection", "load_beir", "load_collection", "load_cranfield"],
        },
    )
