"""Chunkers: sizes within budget, nothing lost, author boundaries, overlap, stable ids."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragindex.config import ChunkingSpec
from ragindex.errors import InvalidInput
from ragindex.hashing import content_hash
from ragindex.ingest import chunk_document
from ragindex.ingest.chunkers import PARENT_FACTOR, chunk_hash, token_budget
from ragindex.models import SentenceTransformerEmbedder
from ragindex.types import Document


def words(text: str) -> int:
    """A tokenizer stand-in for pure chunker tests: one token per whitespace word."""
    return len(text.split())


def spec(**fields: object) -> ChunkingSpec:
    """The cutting alone: contextual prefixes are tests/ingest/test_contextual.py's."""
    return ChunkingSpec.model_validate({"contextual": False, **fields})


def md_doc(text: str) -> Document:
    return Document("src", "doc", "Title", text, metadata={"format": "markdown"})


def section(name: str, sentences: int, word: str = "alpha") -> str:
    body = " ".join(f"{word} sentence {i} has six words." for i in range(sentences))
    return f"## {name}\n\n{body}\n"


PARAGRAPH = st.lists(
    st.text(alphabet="abcdefghij", min_size=1, max_size=8), min_size=1, max_size=60
).map(" ".join)
BLOCK = st.one_of(
    PARAGRAPH,
    PARAGRAPH.map(lambda p: "# " + p[:30]),
    PARAGRAPH.map(lambda p: "- " + p),
    PARAGRAPH.map(lambda p: "```\n" + p.replace(" ", "\n") + "\n```"),
    PARAGRAPH.map(lambda p: "| " + p + " |"),
)
MARKDOWN = st.lists(BLOCK, min_size=1, max_size=12).map("\n\n".join)


@settings(max_examples=60, deadline=None)
@given(
    text=MARKDOWN, max_tokens=st.integers(16, 80), strategy=st.sampled_from(["structure", "window"])
)
def test_chunks_fit_and_lose_nothing(text: str, max_tokens: int, strategy: str) -> None:
    chunks = chunk_document(
        md_doc(text), "t", spec(strategy=strategy, max_tokens=max_tokens), words
    )
    assert all(0 < words(c.text) <= max_tokens for c in chunks)
    assert [c.n for c in chunks] == list(range(len(chunks)))
    assert [c.chunk_id for c in chunks] == [f"src:doc:{n}" for n in range(len(chunks))]
    if strategy == "structure":  # a partition of the text, in order
        assert [w for c in chunks for w in c.text.split()] == text.split()
    else:  # windows cover the text; each starts inside the one before it
        seen = [w for c in chunks for w in c.text.split()]
        assert set(seen) == set(text.split())
        assert chunks[0].text.split()[0] == text.split()[0]
        assert chunks[-1].text.split()[-1] == text.split()[-1]


def test_structure_cuts_on_headings_and_merges_small_blocks() -> None:
    text = "# Doc\n\nShort intro.\n\n" + section("A", 6) + section("B", 6)
    chunks = chunk_document(md_doc(text), "t", spec(max_tokens=64), words)
    # the tiny intro merges with section A; B (36 words) does not fit after A and starts fresh
    assert [c.text.splitlines()[0] for c in chunks] == ["# Doc", "## B"]
    assert chunks[0].metadata["headings"] == ["Doc"]
    assert chunks[1].metadata["headings"] == ["Doc", "B"]
    assert chunks[1].metadata["format"] == "markdown"


def test_a_heading_never_ends_a_chunk() -> None:
    text = section("A", 9) + "\n## B\n\n" + " ".join(["word"] * 20)
    chunks = chunk_document(md_doc(text), "t", spec(max_tokens=60), words)
    for c in chunks:
        assert not c.text.rstrip().splitlines()[-1].startswith("#")
    assert any(c.text.startswith("## B") for c in chunks)


def test_tables_and_code_stay_whole_when_they_fit() -> None:
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | {i * i} |" for i in range(5))
    code = "```python\ndef f():\n\n    return 1\n```"
    text = section("A", 9) + "\n" + table + "\n\n" + code + "\n"
    chunks = chunk_document(md_doc(text), "t", spec(max_tokens=60), words)
    assert any(table in c.text for c in chunks)
    assert any(code in c.text for c in chunks)


def test_oversize_code_is_split_on_lines() -> None:
    code = "```\n" + "\n".join(f"x{i} = f(a, b, c)" for i in range(40)) + "\n```"
    chunks = chunk_document(md_doc(code), "t", spec(max_tokens=30), words)
    assert len(chunks) > 1
    for c in chunks:
        assert words(c.text) <= 30
        assert all(re.fullmatch(r"(```|x\d+ = f\(a, b, c\))", line) for line in c.text.splitlines())


def test_window_overlap_follows_the_spec() -> None:
    text = " ".join(f"w{i}" for i in range(400))
    chunks = chunk_document(md_doc(text), "t", spec(strategy="window", max_tokens=80), words)
    assert all(words(c.text) == 80 for c in chunks[:-1])
    for a, b in itertools.pairwise(chunks):
        shared = set(a.text.split()) & set(b.text.split())
        assert len(shared) == round(0.125 * 80)  # 10 of 80 tokens repeated


def test_parent_child_children_sit_inside_their_section() -> None:
    text = "# Doc\n\n" + section("A", 12) + section("B", 3, word="beta")
    doc = md_doc(text)
    chunks = chunk_document(doc, "t", spec(strategy="parent-child", max_tokens=20), words)
    assert all(words(c.text) <= 20 for c in chunks)
    for c in chunks:
        assert c.context is not None
        assert words(c.context) <= 20 * PARENT_FACTOR
        assert " ".join(c.text.split()) in " ".join(c.context.split())
    beta = [c for c in chunks if "beta" in c.text]
    assert beta and all(c.context and c.context.startswith("## B") for c in beta)
    assert chunks[0].content_hash == chunk_hash("Title", chunks[0].text, chunks[0].context, doc)


def test_an_edit_moves_boundaries_only_in_its_section() -> None:
    a, b, c = section("A", 8), section("B", 8, word="beta"), section("C", 8, word="gamma")
    before = chunk_document(md_doc(a + b + c), "t", spec(max_tokens=64), words)
    edited = b.replace("beta sentence 3 has six words.", "beta sentence 3 now has seven words.")
    after = chunk_document(md_doc(a + edited + c), "t", spec(max_tokens=64), words)
    changed = [x.n for x, y in zip(before, after, strict=True) if x.content_hash != y.content_hash]
    assert changed == [n for n, x in enumerate(before) if "beta sentence 3" in x.text]


def test_same_input_same_chunks_and_hashes() -> None:
    text = section("A", 20)
    one = chunk_document(md_doc(text), "t", spec(max_tokens=40), words)
    two = chunk_document(md_doc(text), "t", spec(max_tokens=40), words)
    assert one == two
    retitled = chunk_document(replace(md_doc(text), title="Other"), "t", spec(max_tokens=40), words)
    assert all(x.content_hash != y.content_hash for x, y in zip(one, retitled, strict=True))
    assert one[0].content_hash != content_hash(one[0].text)  # title is part of the hash


def test_text_format_ignores_markdown_syntax() -> None:
    doc = Document("s", "d", "", "# not a heading\n\n- nor a list", metadata={"format": "text"})
    chunks = chunk_document(doc, "t", spec(), words)
    assert chunks[0].metadata["headings"] == []
    assert chunks[0].text == "# not a heading\n\n- nor a list"


def test_budget_respects_the_model_window() -> None:
    assert token_budget(spec(max_tokens=200), None) == 200
    assert token_budget(spec(max_tokens=200), 126) == 126
    assert token_budget(spec(max_tokens=100), 254) == 100
    with pytest.raises(InvalidInput, match="no room"):
        token_budget(spec(), 0)
    chunks = chunk_document(md_doc(section("A", 30)), "t", spec(max_tokens=200), words, limit=50)
    assert max(words(c.text) for c in chunks) <= 50


def test_real_tokenizer_counts_are_respected(minilm: SentenceTransformerEmbedder) -> None:
    text = (
        "# Supersonic flow\n\n"
        + "The boundary-layer (Mach 3.5) transition, measured at x/c=0.25; Reynolds 10^6. " * 40
        + "\n\n| k | v |\n|---|---|\n| α | β |\n\nunbreakable"
        + "x" * 3000
    )
    for strategy in ("structure", "window", "parent-child"):
        chunks = chunk_document(
            md_doc(text), "t", spec(strategy=strategy, max_tokens=200), minilm.count_tokens, 100
        )
        assert max(minilm.count_tokens(c.text) for c in chunks) <= 100


def test_bad_input() -> None:
    with pytest.raises(InvalidInput, match="tenant_id 'Bad Tenant' is malformed"):
        chunk_document(md_doc("x"), "Bad Tenant", spec(), words)
    doc = Document("s", "d", "", "x", metadata={"format": "pdf"})
    with pytest.raises(InvalidInput, match="document s:d: unknown document format 'pdf'"):
        chunk_document(doc, "t", spec(), words)
