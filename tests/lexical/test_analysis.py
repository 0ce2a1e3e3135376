"""The shared analyzer reproduces Elasticsearch's `standard` analyzer.

Expected token lists below were produced by Elasticsearch 8.19.21 `_analyze` with
`"analyzer": "standard"`; tests/lexical/test_parity.py re-checks against a live server.
"""

from __future__ import annotations

import pytest

from ragindex.lexical import analyze

ES_STANDARD = [
    ("U.S.A. don't 3.14 1,000", ["u.s.a", "don't", "3.14", "1,000"]),
    ("a:b wind-tunnel foo_bar ab12 x.1", ["a:b", "wind", "tunnel", "foo_bar", "ab12", "x", "1"]),
    ("Ωmega ΣΑΣ", ["ωmega", "σασ"]),
    ("東京タワー", ["東", "京", "タワー"]),
    ("___ _a 1;2", ["_a", "1;2"]),
    ("boundary-layer /destalling/ (M=2.5)", ["boundary", "layer", "destalling", "m", "2.5"]),
]


@pytest.mark.parametrize(("text", "tokens"), ES_STANDARD)
def test_matches_elasticsearch_standard(text: str, tokens: list[str]) -> None:
    assert analyze(text) == tokens


@pytest.mark.parametrize("text", ["", "   ", "...", "-- / ()", "\x00\n\t"])
def test_no_tokens_from_punctuation_or_space(text: str) -> None:
    assert analyze(text) == []


def test_no_stemming_and_no_stopwords() -> None:
    assert analyze("The flows are Flowing") == ["the", "flows", "are", "flowing"]
