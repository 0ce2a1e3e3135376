"""Answer generation wired from the spec: one factory for `POST /v1/answer` and `ragindex eval
--answers`."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ragindex.config import GeneratorSpec, RagIndexSpec
from ragindex.protocols import Embedder
from ragindex.router import AnswerService, QueryEngine, make_generator


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
