"""The BM25 view: tantivy written from `chunks.<generation>` on the real file log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ragindex.lexical import LexicalView, TantivyIndex
from ragindex.log import FileLog
from ragindex.records import chunk_key, encode_chunk
from ragindex.testing import WrittenWhileRead
from ragindex.types import Chunk

TOPIC = "t.chunks.g1"


def record(tenant: str, n: int, text: str) -> tuple[int, bytes, bytes]:
    c = Chunk(tenant, f"wiki:{n}:0", "wiki", str(n), 0, "", text, f"h{n}")
    return (n % 2, chunk_key(tenant, c.chunk_id), encode_chunk(c, np.ones(4, np.float32)))


def test_applies_upserts_and_tombstones_then_resumes_from_its_offsets(tmp_path: Path) -> None:
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 2, compacted=True)
    log.append(
        TOPIC, [record("a", n, f"lift wing {n}") for n in range(6)] + [record("b", 0, "lift")]
    )
    log.append(TOPIC, [(1, chunk_key("a", "wiki:3:0"), None)])
    index = TantivyIndex.open(tmp_path / "bm25")
    view = LexicalView(log, TOPIC, 2, index, tmp_path / "bm25-offsets.json")
    assert view.catch_up() == 8
    assert index.count("a") == 5 and index.count("b") == 1
    assert "wiki:3:0" not in [h.chunk_id for h in index.search("lift", 10, "a")]
    assert view.offsets == [log.end_offset(TOPIC, 0), log.end_offset(TOPIC, 1)]
    index.close()

    log.append(TOPIC, [record("a", 7, "lift wing 7")])
    index = TantivyIndex.open(tmp_path / "bm25")
    again = LexicalView(log, TOPIC, 2, index, tmp_path / "bm25-offsets.json")
    assert again.catch_up() == 1 and index.count("a") == 6  # only what was new
    index.close()


def test_offsets_stored_without_their_index_location_replay_the_log(tmp_path: Path) -> None:
    """A file from before the location was stored may belong to another backend: replay."""
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 2, compacted=True)
    log.append(TOPIC, [record("a", n, f"lift wing {n}") for n in range(4)])
    offsets = tmp_path / "bm25-offsets.json"
    offsets.write_text(json.dumps({"0": 2, "1": 2}))  # "caught up", of some other index
    index = TantivyIndex.open(tmp_path / "bm25")
    assert LexicalView(log, TOPIC, 2, index, offsets).catch_up() == 4
    assert index.count("a") == 4
    assert json.loads(offsets.read_text())["location"] == index.location()
    index.close()


def test_a_bounded_catch_up_takes_every_partition_in_turn(tmp_path: Path) -> None:
    """Applied in slices (the replica's searches run between them), a backlog in one
    partition does not hold back the other's records."""
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 2, compacted=True)
    log.append(TOPIC, [record("a", n, f"lift wing {n}") for n in range(0, 40, 2)])  # partition 0
    log.append(TOPIC, [record("a", 1, "lift wing 1")])  # partition 1
    index = TantivyIndex.open(tmp_path / "bm25")
    view = LexicalView(log, TOPIC, 2, index, tmp_path / "bm25-offsets.json")
    assert view.catch_up(max_records=5) == 6  # five of partition 0, then partition 1's one
    assert view.offsets == [5, 1]
    assert view.catch_up(max_records=5) == 5 and view.offsets == [10, 1]
    assert view.catch_up() == 10 and view.offsets == [20, 1]
    assert view.catch_up(max_records=5) == 0 and index.count("a") == 21
    index.close()


def test_a_catch_up_under_steady_writes_stops_at_the_end_it_found(tmp_path: Path) -> None:
    """Records written while it applies wait for the next catch-up."""
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 2, compacted=True)
    log.append(TOPIC, [record("a", n, f"lift wing {n}") for n in range(6)])
    steady = WrittenWhileRead(log, lambda n: record("a", 100 + 2 * n, "lift"), writes=50)
    index = TantivyIndex.open(tmp_path / "bm25")
    view = LexicalView(steady, TOPIC, 2, index, tmp_path / "bm25-offsets.json")  # type: ignore[arg-type]
    assert view.catch_up() == 6 and index.count("a") == 6
    index.close()
