"""Readers in other processes: a read-only tantivy index sees the writer's commits on reload."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragindex.errors import BackendUnavailable
from ragindex.lexical.tantivy_index import TantivyIndex
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


def test_lexical_reader_opens_after_the_stamp_and_follows_the_writer(tmp_path: Path) -> None:
    """The cluster Lexical deployment's path: identity from the stamp, backend from the spec."""
    from ragindex.app.engine import check_stamp, open_lexical
    from ragindex.app.serve.query_side import reload_lexical, stamped_identity
    from ragindex.config import RagIndexSpec
    from ragindex.types import ModelIdentity

    spec = RagIndexSpec()
    identity = ModelIdentity("m", "abc123", 4, True)
    assert stamped_identity(tmp_path) is None  # the writer has not started: readers wait
    check_stamp(tmp_path, spec, identity)
    assert stamped_identity(tmp_path) == identity
    writer = open_lexical(spec, tmp_path, identity)
    reader = open_lexical(spec, tmp_path, identity, read_only=True)
    try:
        writer.upsert([chunk(0, "a volcano erupts")])
        assert reader.search("volcano", 5, "t") == []
        reload_lexical(reader)
        assert [h.chunk_id for h in reader.search("volcano", 5, "t")] == ["s:d:0"]
    finally:
        reader.close()
        writer.close()


def test_elasticsearch_backend_without_url_is_refused(tmp_path: Path) -> None:
    from ragindex.app.engine import open_lexical
    from ragindex.config import RagIndexSpec
    from ragindex.errors import InvalidInput
    from ragindex.types import ModelIdentity

    spec = RagIndexSpec.model_validate({"lexical": {"backend": "elasticsearch"}})
    with pytest.raises(InvalidInput, match="elasticsearchUrl"):
        open_lexical(spec, tmp_path, ModelIdentity("m", "abc", 4, True), read_only=True)
    assert not (tmp_path / "lexical").exists()
