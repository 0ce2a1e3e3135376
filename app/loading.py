"""Where the CLI finds its inputs: user folders of documents and the shared Cranfield data
(its SMART-format files are read here; the judged collection built on them is measurement's)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ragindex.errors import InvalidInput
from ragindex.ingest import load_file
from ragindex.types import Document

SUFFIXES = (".md", ".markdown", ".txt", ".jsonl")
SMART_ID_RE = re.compile(r"^\.I(\s|$)")
SMART_FIELDS = (".T", ".A", ".B", ".W")


def cranfield_dir() -> Path:
    """../shared/data/cranfield next to the repository, or $RAGINDEX_SHARED_DIR/data/cranfield."""
    shared = os.environ.get("RAGINDEX_SHARED_DIR")
    root = Path(shared) if shared else Path(__file__).resolve().parents[2] / "shared"
    path = root / "data" / "cranfield"
    if not (path / "cran.all.1400").is_file():
        raise InvalidInput(
            f"Cranfield not found at {path}: set RAGINDEX_SHARED_DIR, or pass a folder of your own"
        )
    return path


def cranfield_documents(directory: Path, source: str = "cranfield") -> list[Document]:
    """Cranfield's documents (cran.all.1400) that have text: what `ragindex demo` ingests."""
    path = directory / "cran.all.1400"
    documents = []
    for rec in read_smart(path, path.read_text(encoding="utf-8").splitlines()):
        text = "\n".join(rec.fields.get(".W", [])).strip()
        if text:  # a few records have none: nothing to index (the API would refuse them)
            title = collapse(rec.fields.get(".T", []))
            documents.append(
                Document(source=source, doc_id=str(int(rec.rid)), title=title, text=text)
            )
    return documents


@dataclass(frozen=True)
class SmartRecord:
    lineno: int
    rid: str
    fields: dict[str, list[str]]


def read_smart(
    path: Path, lines: list[str], error: type[InvalidInput] = InvalidInput
) -> list[SmartRecord]:
    """Parse SMART records (`.I id`, then `.T/.A/.B/.W` fields).

    `.W` is always the last field: every later line up to the next `.I` is text, and stray
    marker lines inside it (records 240, 576 and 578 of cran.all.1400) are dropped.
    """
    records: list[SmartRecord] = []
    current: str | None = None
    for lineno, line in enumerate(lines, start=1):
        if SMART_ID_RE.match(line):
            rid = line[2:].strip()
            if not rid.isdigit():
                raise error(f"{path}:{lineno}: record id {rid!r} is not a number")
            records.append(SmartRecord(lineno, rid, {}))
            current = None
        elif not records:
            if line.strip():
                raise error(f"{path}:{lineno}: text before the first .I record")
        elif line.strip() in SMART_FIELDS:
            if current != ".W":
                current = line.strip()
                records[-1].fields.setdefault(current, [])
        elif current is not None:
            records[-1].fields[current].append(line.rstrip())
    return records


def collapse(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


def documents_from_paths(paths: Iterable[Path], source: str | None) -> list[Document]:
    """Every .md/.txt/.jsonl file under the given files or folders, as Documents.

    The source defaults to the folder's name, so ids stay stable when the same folder is
    ingested again. Duplicate (source, doc_id) pairs are refused: the second would silently
    overwrite the first.
    """
    documents: list[Document] = []
    for path in paths:
        if not path.exists():
            raise InvalidInput(f"{path}: no such file or folder")
        files = (
            sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
            if path.is_dir()
            else [path]
        )
        folder = path if path.is_dir() else path.parent
        name = source or _source_name(folder)
        for file in files:
            documents.extend(load_file(file, name))
    seen: set[str] = set()
    for doc in documents:
        if doc.key in seen:
            raise InvalidInput(f"document {doc.key} appears twice in the input")
        seen.add(doc.key)
    if not documents:
        raise InvalidInput("no .md, .txt or .jsonl documents found in the given paths")
    return documents


def _source_name(folder: Path) -> str:
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in folder.resolve().name)
    return name or "docs"
