"""Parse source files into Documents, and document text into structural blocks.

Blocks follow the author's structure (headings, paragraphs, lists, code fences, tables), so
the chunker can cut where the author did instead of in the middle of a table or a code
sample. Every error names the file (and line) at fault, and nothing is returned on error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal

import yaml

from ragindex.errors import InvalidInput
from ragindex.types import Document

BlockKind = Literal["heading", "paragraph", "list", "code", "table"]
FORMATS = ("markdown", "text")
MARKDOWN_SUFFIXES = (".md", ".markdown")
TEXT_SUFFIXES = (".txt", ".text")
JSONL_SUFFIXES = (".jsonl", ".ndjson")

# Every pattern is anchored at the line start with bounded or possessive-free repeats that
# cannot backtrack over the line: a lazy `(.*?)[ \t#]*$` once made one 80 k-character heading
# line cost 23 s (quadratic). The heading's title is cut with str methods instead.
_HEADING = re.compile(r" {0,3}(#{1,6})[ \t]")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d{1,9}[.)])[ \t]+\S")
_TABLE_ROW = re.compile(r"^ {0,3}\|")


@dataclass(frozen=True)
class Block:
    """One structural unit of a document and the headings it sits under (outermost first)."""

    kind: BlockKind
    text: str
    heading_path: tuple[str, ...]


def parse_markdown(text: str) -> list[Block]:
    """Split Markdown into headings, paragraphs, lists, code fences and tables.

    Code fences, tables and lists are kept whole; an unterminated fence runs to the end.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    path: list[tuple[int, str]] = []  # (level, title) of the enclosing headings
    titles: tuple[str, ...] = ()  # their titles, rebuilt only when a heading changes them
    i = 0

    def take(start: int, keep: Any) -> int:
        end = start
        while end < len(lines) and keep(lines[end]):
            end += 1
        return end

    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if heading := _HEADING.match(line):
            level, title = len(heading.group(1)), line[heading.end() :].rstrip(" \t#").strip()
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, title))
            titles = tuple(t for _, t in path)
            blocks.append(Block("heading", line.strip(), titles))
            i += 1
        elif fence := _FENCE.match(line):
            marker = fence.group(1)
            end = i + 1
            while end < len(lines) and not lines[end].lstrip().startswith(marker):
                end += 1
            end = min(end + 1, len(lines))
            blocks.append(Block("code", "\n".join(lines[i:end]), titles))
            i = end
        elif _TABLE_ROW.match(line):
            end = take(i, lambda s: bool(_TABLE_ROW.match(s)))
            blocks.append(Block("table", "\n".join(lines[i:end]), titles))
            i = end
        elif _LIST_ITEM.match(line):
            # Items and their indented continuations; a blank line inside the list is kept
            # when the list goes on after it.
            end = i + 1
            while end < len(lines) and (
                _continues_list(lines[end])
                or (
                    not lines[end].strip()
                    and end + 1 < len(lines)
                    and _continues_list(lines[end + 1])
                )
            ):
                end += 1
            blocks.append(Block("list", "\n".join(lines[i:end]).strip("\n"), titles))
            i = end
        else:
            end = take(
                i,
                lambda s: (
                    bool(s.strip())
                    and not any(r.match(s) for r in (_HEADING, _FENCE, _TABLE_ROW, _LIST_ITEM))
                ),
            )
            end = max(end, i + 1)
            blocks.append(Block("paragraph", "\n".join(lines[i:end]), titles))
            i = end
    return blocks


def _continues_list(line: str) -> bool:
    return bool(_LIST_ITEM.match(line)) or (bool(line.strip()) and line[:1] in (" ", "\t"))


def parse_text(text: str) -> list[Block]:
    """Plain text: paragraphs separated by blank lines, no headings."""
    paragraphs = re.split(r"\n[ \t]*\n", text)
    return [Block("paragraph", p.strip("\n"), ()) for p in paragraphs if p.strip()]


def parse_blocks(text: str, fmt: str) -> list[Block]:
    """Blocks of a document's text in its format ('markdown' or 'text')."""
    if fmt == "markdown":
        return parse_markdown(text)
    if fmt == "text":
        return parse_text(text)
    raise InvalidInput(f"unknown document format {fmt!r}: use one of {', '.join(FORMATS)}")


def decode_utf8(data: bytes, where: str) -> str:
    """Strict UTF-8 (a BOM is dropped): bad bytes are an error naming the file, not U+FFFD."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{where}: not valid UTF-8 (byte offset {exc.start})") from None


def document_from_mapping(obj: object, where: str, default_source: str | None = None) -> Document:
    """A Document from a JSON-like object; errors say where the object came from."""
    if not isinstance(obj, Mapping):
        raise InvalidInput(f"{where}: expected a JSON object, got {type(obj).__name__}")
    fields = dict(obj)
    if "source" not in fields and default_source is not None:
        fields["source"] = default_source
    missing = [f for f in ("source", "doc_id", "text") if f not in fields]
    if missing:
        raise InvalidInput(f"{where}: missing field(s) {', '.join(missing)}")
    unknown = sorted(
        set(fields) - {"source", "doc_id", "title", "text", "updated", "metadata", "acl"}
    )
    if unknown:
        raise InvalidInput(f"{where}: unknown field(s) {', '.join(unknown)}")
    text = fields["text"]
    if isinstance(text, bytes):
        text = decode_utf8(text, where)
    updated = fields.get("updated")
    if updated is not None and not isinstance(updated, str):
        raise InvalidInput(f"{where}: updated must be a string (ISO 8601) or null")
    try:
        return Document(
            source=fields["source"],
            doc_id=fields["doc_id"],
            title=fields.get("title", ""),
            text=text,
            updated=updated,
            metadata=fields.get("metadata") or {},
            acl=fields.get("acl"),
        )
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def parse_jsonl(data: bytes, name: str, default_source: str | None = None) -> list[Document]:
    """One Document per non-blank line; the first bad line aborts with its line number."""
    text = decode_utf8(data, name)
    docs = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        docs.append(document_from_mapping(obj, where, default_source))
    return docs


def load_file(path: str | Path, source: str) -> list[Document]:
    """Documents from a .md, .txt or .jsonl file.

    A Markdown or text file is one document whose doc_id is the file name and whose title is
    its first heading (else the file stem); JSONL lines may carry their own source.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{p}: cannot be read ({exc.strerror})") from None
    suffix = p.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return parse_jsonl(data, str(p), default_source=source)
    if suffix in MARKDOWN_SUFFIXES:
        fmt = "markdown"
    elif suffix in TEXT_SUFFIXES:
        fmt = "text"
    else:
        raise InvalidInput(f"{p}: unsupported file type {suffix or '(none)'!r}")
    text = decode_utf8(data, str(p))
    front: dict[str, Any] = {}
    if fmt == "markdown":
        front, text = split_front_matter(text, str(p))
    title = next((b.heading_path[-1] for b in parse_blocks(text, fmt) if b.kind == "heading"), "")
    fields: dict[str, Any] = {"doc_id": p.name, "title": title or p.stem}
    fields.update({k: front.pop(k) for k in FRONT_MATTER_FIELDS if k in front})
    metadata = {"format": fmt, **front}
    return [
        document_from_mapping(
            {"source": source, **fields, "text": text, "metadata": metadata}, str(p)
        )
    ]


FRONT_MATTER_FIELDS = ("doc_id", "title", "updated", "acl")
"""Front matter keys that set the document's own fields; every other key is metadata."""


def split_front_matter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """A Markdown file's YAML front matter (between a first line `---` and the next `---` or
    `...` line) as a mapping, and the text after it; no front matter: ({}, text)."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return {}, text
    end = next((i for i, line in enumerate(lines[1:], 1) if line.rstrip() in ("---", "...")), None)
    if end is None:
        raise InvalidInput(f"{where}: front matter opened by '---' on line 1 is never closed")
    try:
        front = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise InvalidInput(f"{where}: front matter is not YAML: {problem}") from None
    if front is None:
        front = {}
    if not isinstance(front, dict) or not all(isinstance(k, str) for k in front):
        raise InvalidInput(f"{where}: front matter must be a mapping of names to values")
    if "updated" in front and not isinstance(front["updated"], str):
        front["updated"] = _rfc3339(front["updated"], where)
    return front, "\n".join(lines[end + 1 :])


def _rfc3339(value: object, where: str) -> str:
    """YAML reads an unquoted date as a date or datetime: back to the ISO string ingest keeps."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, date):
        return f"{value.isoformat()}T00:00:00+00:00"
    raise InvalidInput(f"{where}: front matter updated must be a date or RFC 3339 date-time")
