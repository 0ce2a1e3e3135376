"""Where the CLI finds its inputs: user folders of documents and the shared Cranfield data."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ragindex.errors import InvalidInput
from ragindex.ingest.parsers import load_file
from ragindex.types import Document

SUFFIXES = (".md", ".markdown", ".txt", ".jsonl")


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
