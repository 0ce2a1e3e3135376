"""Parsers: Markdown structure, plain text, JSONL and file loading with errors that say where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragindex.errors import InvalidInput
from ragindex.ingest import load_file
from ragindex.ingest.parsers import (
    document_from_mapping,
    parse_blocks,
    parse_jsonl,
    parse_markdown,
    parse_text,
)
from ragindex.types import MAX_DOCUMENT_CHARS

MARKDOWN = """# Guide

Intro line one
continues here.

## Install

1. Download it.
2. Run it:

   indented continuation of item 2

```bash
pip install x

echo done
```

| col | val |
|-----|-----|
| a   | 1   |

### Deep

Deep text.

## Use
Text right under the heading.
- a list right after a paragraph
"""


def test_markdown_blocks_and_heading_paths() -> None:
    blocks = parse_markdown(MARKDOWN)
    assert [(b.kind, b.heading_path) for b in blocks] == [
        ("heading", ("Guide",)),
        ("paragraph", ("Guide",)),
        ("heading", ("Guide", "Install")),
        ("list", ("Guide", "Install")),
        ("code", ("Guide", "Install")),
        ("table", ("Guide", "Install")),
        ("heading", ("Guide", "Install", "Deep")),
        ("paragraph", ("Guide", "Install", "Deep")),
        ("heading", ("Guide", "Use")),
        ("paragraph", ("Guide", "Use")),
        ("list", ("Guide", "Use")),
    ]
    code = blocks[4].text
    assert code.startswith("```bash") and code.endswith("```")
    assert "pip install x\n\necho done" in code  # blank line inside the fence kept
    assert blocks[5].text.count("\n") == 2  # all three table rows in one block
    assert "indented continuation of item 2" in blocks[3].text
    assert blocks[1].text == "Intro line one\ncontinues here."


def test_unterminated_fence_runs_to_the_end() -> None:
    blocks = parse_markdown("text\n\n```\ncode\n# not a heading\n")
    assert [b.kind for b in blocks] == ["paragraph", "code"]
    assert "# not a heading" in blocks[1].text


def test_plain_text_paragraphs() -> None:
    blocks = parse_text("one\ntwo\n\n  \n\nthree\n\n# not special\n")
    assert [b.text for b in blocks] == ["one\ntwo", "three", "# not special"]
    assert all(b.kind == "paragraph" and b.heading_path == () for b in blocks)


def test_unknown_format() -> None:
    with pytest.raises(InvalidInput, match="unknown document format 'html'"):
        parse_blocks("x", "html")


def _jsonl(*objs: object) -> bytes:
    return "\n".join(o if isinstance(o, str) else json.dumps(o) for o in objs).encode()


def test_jsonl_documents() -> None:
    data = _jsonl(
        {"doc_id": "1", "title": "One", "text": "first"},
        "",
        {
            "source": "other",
            "doc_id": "2",
            "text": "second",
            "updated": "2024-01-01",
            "metadata": {"lang": "en"},
        },
    )
    docs = parse_jsonl(data, "f.jsonl", default_source="src")
    assert [(d.source, d.doc_id, d.title, d.text) for d in docs] == [
        ("src", "1", "One", "first"),
        ("other", "2", "", "second"),
    ]
    assert docs[1].metadata == {"lang": "en"} and docs[1].updated == "2024-01-01"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"doc_id": "1", "text": ', r"f.jsonl line 2: invalid JSON"),
        ('{"doc_id": "1"}', r"f.jsonl line 2: missing field\(s\) text"),
        ('{"text": "x"}', r"f.jsonl line 2: missing field\(s\) doc_id"),
        ('["a"]', r"f.jsonl line 2: expected a JSON object"),
        ('{"doc_id": "1", "text": "  "}', r"f.jsonl line 2: document src:1: text is empty"),
        ('{"doc_id": "a b", "text": "x"}', r"f.jsonl line 2: doc_id 'a b' is malformed"),
        ('{"doc_id": "1", "text": "x", "body": 1}', r"unknown field\(s\) body"),
        ('{"doc_id": "1", "text": "x", "updated": 5}', r"updated must be a string"),
    ],
)
def test_jsonl_errors_name_the_line(line: str, message: str) -> None:
    data = _jsonl({"doc_id": "0", "text": "fine"}, line)
    with pytest.raises(InvalidInput, match=message):
        parse_jsonl(data, "f.jsonl", default_source="src")


def test_jsonl_without_any_source() -> None:
    with pytest.raises(InvalidInput, match=r"line 1: missing field\(s\) source"):
        parse_jsonl(_jsonl({"doc_id": "1", "text": "x"}), "f.jsonl")


def test_invalid_utf8_names_the_file(tmp_path: Path) -> None:
    for name in ("bad.md", "bad.txt", "bad.jsonl"):
        p = tmp_path / name
        p.write_bytes(b"fine text \xff\xfe more")
        with pytest.raises(InvalidInput, match=rf"{name}: not valid UTF-8 \(byte offset 10\)"):
            load_file(p, "src")


def test_bytes_text_in_a_mapping_is_decoded_strictly() -> None:
    doc = document_from_mapping({"source": "s", "doc_id": "d", "text": "ok é".encode()}, "x")
    assert doc.text == "ok é"
    with pytest.raises(InvalidInput, match="x: not valid UTF-8"):
        document_from_mapping({"source": "s", "doc_id": "d", "text": b"\xc3("}, "x")


def test_load_files(tmp_path: Path) -> None:
    md = tmp_path / "guide.md"
    md.write_text(MARKDOWN, encoding="utf-8")
    (doc,) = load_file(md, "docs")
    assert (doc.source, doc.doc_id, doc.title) == ("docs", "guide.md", "Guide")
    assert doc.metadata == {"format": "markdown"}
    txt = tmp_path / "notes.txt"
    txt.write_bytes(b"\xef\xbb\xbfplain notes")  # a BOM is dropped, not indexed
    (note,) = load_file(txt, "docs")
    assert (note.title, note.text, note.metadata) == ("notes", "plain notes", {"format": "text"})
    jl = tmp_path / "batch.jsonl"
    jl.write_bytes(_jsonl({"doc_id": "a", "text": "x"}, {"doc_id": "b", "text": "y"}))
    assert [d.doc_id for d in load_file(jl, "docs")] == ["a", "b"]


def test_load_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot be read"):
        load_file(tmp_path / "missing.md", "docs")
    (tmp_path / "x.pdf").write_bytes(b"%PDF")
    with pytest.raises(InvalidInput, match=r"unsupported file type '\.pdf'"):
        load_file(tmp_path / "x.pdf", "docs")
    (tmp_path / "empty.md").write_text("\n\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match=r"empty\.md: document docs:empty\.md: text is empty"):
        load_file(tmp_path / "empty.md", "docs")


ADVERSARIAL_LINES = {
    # One line of the document limit each: shapes that made backtracking regexes quadratic.
    "heading of spaces": "# " + " " * (MAX_DOCUMENT_CHARS - 3) + "x",
    "heading of hashes": "# " + "# " * (MAX_DOCUMENT_CHARS // 2 - 2) + "x",
    "heading then tabs": "## x" + "\t" * (MAX_DOCUMENT_CHARS - 5) + "y",
    "list item of spaces": "- " + " " * (MAX_DOCUMENT_CHARS - 2),
    "numbered item of digits": "1" * (MAX_DOCUMENT_CHARS - 2) + ".",
    "fence marker": "`" * (MAX_DOCUMENT_CHARS // 2) + "\n" + "`" * (MAX_DOCUMENT_CHARS // 2 - 1),
    "table pipes": "|" * MAX_DOCUMENT_CHARS,
    "blank lines": "\n \t" * (MAX_DOCUMENT_CHARS // 3) + "x",
    "short headings": "# a\n" * (MAX_DOCUMENT_CHARS // 4),
}


@pytest.mark.timeout(120)  # the quadratic heading regex took hours on the first shape
@pytest.mark.parametrize("shape", sorted(ADVERSARIAL_LINES))
def test_markdown_parsing_is_linear_on_adversarial_lines(shape: str) -> None:
    import gc
    import time

    def parse_time(text: str) -> float:
        gc.collect()
        gc.disable()  # the collector's pauses are not the parser's complexity
        try:
            start = time.perf_counter()
            parse_blocks(text, "markdown")
            parse_blocks(text, "text")
            return time.perf_counter() - start
        finally:
            gc.enable()

    text = ADVERSARIAL_LINES[shape]
    assert len(text) <= MAX_DOCUMENT_CHARS
    full = parse_time(text)
    quarter = parse_time(text[: len(text) // 4])
    print(f"parse {shape!r}: {len(text):,} characters in {full:.3f} s (a quarter: {quarter:.3f} s)")
    # Linear: 4x the text, ~4x the time; quadratic would be 16x (and hours at this size).
    # Ratios measured in one run hold on a busy box where absolute times do not.
    assert full < 10 * quarter + 1.0, f"{shape}: {full:.2f} s vs {quarter:.2f} s for a quarter"


def test_a_long_heading_keeps_its_title_and_drops_closing_hashes() -> None:
    blocks = parse_markdown("#   Lift and drag  ##  \nbody\n###### " + "w " * 50_000 + "#")
    assert blocks[0].heading_path == ("Lift and drag",)
    assert blocks[2].heading_path[-1] == ("w " * 50_000).strip()


def test_jsonl_refuses_lone_surrogates_naming_the_line() -> None:
    data = b'{"doc_id": "1", "text": "ok"}\n{"doc_id": "2", "text": "bad \\ud800 text"}\n'
    with pytest.raises(InvalidInput, match=r"x.jsonl line 2: .*lone surrogate"):
        parse_jsonl(data, "x.jsonl", default_source="s")


def test_markdown_front_matter_sets_fields_and_metadata(tmp_path: Path) -> None:
    md = tmp_path / "guide.md"
    md.write_text(
        "---\ntitle: Install guide\ndoc_id: install\nupdated: 2026-11-30\n"
        "acl: [group:eng]\ntags: [setup, helm]\nteam: platform\n---\n# Heading\n\nBody text.\n"
    )
    (doc,) = load_file(md, "docs")
    assert (doc.doc_id, doc.title, doc.updated) == (
        "install",
        "Install guide",
        "2026-11-30T00:00:00+00:00",
    )
    assert doc.acl == ("group:eng",)
    assert doc.metadata == {"format": "markdown", "tags": ["setup", "helm"], "team": "platform"}
    assert doc.text.startswith("# Heading") and "---" not in doc.text


@pytest.mark.parametrize(
    ("head", "message"),
    [
        ("---\ntitle: x\n# never closed\n", "never closed"),
        ("---\ntitle: [unclosed\n---\ntext\n", "front matter is not YAML"),
        ("---\n- a list\n---\ntext\n", "must be a mapping"),
        ("---\nupdated: 12\n---\ntext\n", "updated must be a date"),
    ],
)
def test_bad_front_matter_names_the_file(tmp_path: Path, head: str, message: str) -> None:
    md = tmp_path / "bad.md"
    md.write_text(head)
    with pytest.raises(InvalidInput, match=f"bad.md: .*{message}"):
        load_file(md, "docs")


def test_a_thematic_break_later_is_not_front_matter(tmp_path: Path) -> None:
    md = tmp_path / "plain.md"
    md.write_text("# Title\n\ntext\n\n---\n\nmore\n")
    (doc,) = load_file(md, "docs")
    assert doc.title == "Title" and doc.metadata == {"format": "markdown"}
