"""Where the generator's API key comes from: a mounted Secret file or a RAGINDEX_GENERATOR_ var."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragindex.app.answers import generator_api_key
from ragindex.config import GeneratorSpec
from ragindex.errors import InvalidInput

REMOTE = {"backend": "openai-compatible", "baseUrl": "http://gen", "model": "m"}


def test_key_from_a_ragindex_generator_variable_and_nothing_else() -> None:
    environ = {"RAGINDEX_GENERATOR_KEY": "k1", "ES_PASSWORD": "superuser"}
    gen = GeneratorSpec.model_validate(REMOTE | {"apiKeyEnv": "RAGINDEX_GENERATOR_KEY"})
    assert generator_api_key(gen, environ) == "k1"
    assert generator_api_key(GeneratorSpec.model_validate(REMOTE), environ) is None


def test_key_from_a_secret_file(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("k2\n")
    gen = GeneratorSpec.model_validate(REMOTE | {"apiKeyFile": str(tmp_path / "key")})
    assert generator_api_key(gen, {}) == "k2"
    missing = GeneratorSpec.model_validate(REMOTE | {"apiKeyFile": str(tmp_path / "nope")})
    with pytest.raises(InvalidInput, match=r"apiKeyFile .* cannot be read"):
        generator_api_key(missing, {})
