"""The generator's API key comes from a RAGINDEX_GENERATOR_* variable and nowhere else."""

from __future__ import annotations

from ragindex.app.answer_from_spec import generator_api_key
from ragindex.config import GeneratorSpec

REMOTE = {"backend": "openai-compatible", "baseUrl": "http://gen", "model": "m"}


def test_key_from_a_ragindex_generator_variable_and_nothing_else() -> None:
    environ = {"RAGINDEX_GENERATOR_KEY": "k1", "ES_PASSWORD": "superuser"}
    gen = GeneratorSpec.model_validate(REMOTE | {"apiKeyEnv": "RAGINDEX_GENERATOR_KEY"})
    assert generator_api_key(gen, environ) == "k1"
    assert generator_api_key(GeneratorSpec.model_validate(REMOTE), environ) is None
