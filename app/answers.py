"""Answer generation wired from the spec: one factory for `POST /v1/answer` and the CLI."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ragindex.config import GeneratorSpec, RagIndexSpec
from ragindex.evals.answers import cranfield_cases, evaluate_answers, out_of_domain_cases
from ragindex.evals.collections import Collection
from ragindex.protocols import Embedder
from ragindex.router.answer import AnswerService
from ragindex.router.generators import make_generator
from ragindex.router.query import QueryEngine

if TYPE_CHECKING:  # the embedded index composes the query side, which imports this module
    from ragindex.app.embedded import EmbeddedIndex

EVAL_TENANT = "default"


def answer_service(spec: RagIndexSpec, query: QueryEngine, embedder: Embedder) -> AnswerService:
    """The AnswerService the spec's generator section describes (extractive by default)."""
    gen = spec.generator
    generator = make_generator(
        gen.backend,
        base_url=gen.base_url,
        model=gen.model,
        api_key=generator_api_key(gen, os.environ),
        timeout=gen.timeout_s,
    )
    return AnswerService(query, generator, embedder.count_tokens, embedder=embedder)


def generator_api_key(gen: GeneratorSpec, environ: Mapping[str, str]) -> str | None:
    """The generator's API key from its RAGINDEX_GENERATOR_* variable (the spec's pattern
    allows no other name; the operator injects apiKeySecret as one); None when unset."""
    return environ.get(gen.api_key_env) if gen.api_key_env else None


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
