"""The BM25 view: a consumer of `chunks.<generation>` that bulk-writes a LexicalIndex.

It reads every partition from its stored offsets, upserts chunks and deletes tombstones in
one bulk call per run, and stores the new offsets (atomically, beside the index) only after
the index accepted the write. A crash in between re-applies a batch, which is harmless:
upserts and deletes are idempotent by chunk id. The offsets are stored with the index's
location (`LexicalIndex.location`): offsets of another location (the backend, the alias or the
index changed in place), or of none (a file from before locations were stored), restart the
view from 0, so the new index is backfilled. Deleting the offsets file rebuilds the view by
replay.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from ragindex.protocols import LexicalIndex, Log
from ragindex.records import chunk_header, split_chunk_key
from ragindex.types import Chunk, LogRecord

# Records per bulk write: each bulk write ends in one commit of the index, and a commit costs
# ~0.5 s on tantivy at 100 k chunks, so a replay from 0 commits every 50 k records (~75 MB
# held at once), not every 2 k.
BULK_RECORDS = 50_000

log = logging.getLogger("ragindex.lexical")


def offsets_for(stored: dict[str, Any], location: str, partitions: int) -> list[int]:
    """The offsets to resume from: the stored ones if they were applied to `location`, else
    zeros (replay everything)."""
    if stored.get("location") != location:
        return [0] * partitions
    applied = stored.get("offsets", {})
    return [int(applied.get(str(p), 0)) for p in range(partitions)]


class LexicalView:
    """Applies `chunks.<generation>` to a BM25 index, offset by offset."""

    def __init__(
        self, log_: Log, topic: str, partitions: int, index: LexicalIndex, offsets_path: Path
    ) -> None:
        self.log = log_
        self.topic = topic
        self.index = index
        self.offsets_path = offsets_path
        self.location = index.location()
        stored = json.loads(offsets_path.read_text()) if offsets_path.exists() else {}
        self.offsets = offsets_for(stored, self.location, partitions)
        if stored and stored.get("location") != self.location:
            log.warning(
                "the BM25 offsets in %s were applied to %s, not %s: replaying %s from 0",
                offsets_path,
                stored.get("location", "an unrecorded index"),
                self.location,
                topic,
            )

    def catch_up(self, max_records: int | None = None) -> int:
        """Apply what is new in every partition: about `max_records` of it (one read per
        partition in turn, so that no partition waits behind another's backlog), or else up to
        each partition's end as this call found it (under steady writes a catch-up that chased
        the end would not return until the writes paused); returns records applied."""
        read_size = BULK_RECORDS if max_records is None else min(BULK_RECORDS, max_records)
        goals = (
            None
            if max_records is not None
            else [self.log.end_offset(self.topic, p) for p in range(len(self.offsets))]
        )
        applied = 0
        progressed = True
        while progressed and (max_records is None or applied < max_records):
            progressed = False
            for p in range(len(self.offsets)):
                if goals is not None and self.offsets[p] >= goals[p]:
                    continue
                records = self.log.read(self.topic, p, self.offsets[p], max_records=read_size)
                if not records:
                    continue
                self._apply(records)
                self.offsets[p] = records[-1].offset + 1
                self._store_offsets()
                applied += len(records)
                progressed = True
        return applied

    def _apply(self, records: list[LogRecord]) -> None:
        """Bulk calls; a key pending in the other kind of call flushes that one first. Each
        write carries its record's offset + 1 as its version (an index shared by several
        replicas keeps the newest)."""
        upserts: dict[tuple[str, str], tuple[Chunk, int]] = {}
        deletes: dict[tuple[str, str], int] = {}

        def flush_upserts() -> None:
            if upserts:
                chunks, versions = zip(*upserts.values(), strict=True)
                self.index.upsert(list(chunks), versions=list(versions))
                upserts.clear()

        def flush_deletes() -> None:
            by_tenant: dict[str, tuple[list[str], list[int]]] = {}
            for (tenant, chunk_id), version in deletes.items():
                ids, versions = by_tenant.setdefault(tenant, ([], []))
                ids.append(chunk_id)
                versions.append(version)
            for tenant, (ids, versions) in by_tenant.items():
                self.index.delete(tenant, ids, versions=versions)
            deletes.clear()

        for record in records:
            key = split_chunk_key(record.key)
            if record.value is None:
                if key in upserts:
                    flush_upserts()
                deletes[key] = record.offset + 1
            else:
                if key in deletes:
                    flush_deletes()
                upserts[key] = (chunk_header(record.value), record.offset + 1)
        flush_upserts()
        flush_deletes()

    def _store_offsets(self) -> None:
        """Write the offsets file atomically (temp file, fsync, rename)."""
        self.offsets_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.offsets_path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            applied = {str(p): o for p, o in enumerate(self.offsets)}
            f.write(json.dumps({"location": self.location, "offsets": applied}).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.offsets_path)
