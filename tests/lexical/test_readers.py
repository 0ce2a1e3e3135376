"""Readers in other processes: a read-only tantivy index sees the writer's commits on reload."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragindex.errors import BackendUnavailable
from ragindex.lexical import TantivyIndex
from ragindex.types import Chunk


def chunk(n: int, text: str) -> Chunk:
    return Chunk("t", f"s:d:{n}", "s", "d", n, "T", text, f"h{n}")


def test_read_only_tantivy_follows_the_writer(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="read-only"):
        TantivyIndex.open(tmp_path / "absent", read_only=True)
    writer = TantivyIndex.open(tmp_path)
    reader = TantivyIndex.open(tmp_path, read_only=True)  # takes no writer lock
    try:
        writer.upsert([chunk(0, "a lighthouse on the coast")])
        reader.reload()
        assert [h.chunk_id for h in reader.search("lighthouse", 5, "t")] == ["s:d:0"]
        writer.delete("t", ["s:d:0"])
        reader.reload()
        assert reader.search("lighthouse", 5, "t") == []
        with pytest.raises(BackendUnavailable, match="read-only"):
            reader.upsert([chunk(1, "no writes here")])
        assert reader.count("t") == 0
    finally:
        reader.close()
        writer.close()
    with pytest.raises(BackendUnavailable, match="closed"):
        reader.search("lighthouse", 5, "t")
