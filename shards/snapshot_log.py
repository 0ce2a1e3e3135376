"""Shard snapshots carried in the log, so a new replica on any node starts without a rebuild.

Rebuilding a shard's HNSW graph from `chunks.<generation>` is the slow path (50 k vectors take
24-46 s on 2 cores), and a replica on another node shares no disk with its peers. So a serving
replica publishes its snapshot files (FAISS partitions, texts, their manifest; DenseShard.save)
to `snapshots.<generation>`, one partition per dense shard, and a fresh replica loads the
newest complete one, then replays `chunks.<generation>` only from the offset it covers.

Records of one snapshot: its files cut into parts under Kafka's message size limit (key
`<snapshot id>/<n>`), then its manifest last (key `<snapshot id>/manifest`: format, the
embedding model identity, the chunks topic, the chunk offset covered, every file's size and
sha256). The topic is not compacted: the publisher truncates it before the snapshot it just
completed, so it holds about one snapshot per shard. A reader takes the newest manifest of its
own identity and chunks topic whose parts are all there and match their hashes; a partial,
corrupt, foreign or missing snapshot yields None (the caller replays from 0).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragindex.errors import InvalidInput, RagIndexError
from ragindex.protocols import Log
from ragindex.types import LogRecord, ModelIdentity

log = logging.getLogger("ragindex.shards")

FORMAT = 1
PART_BYTES = 512 * 1024  # far under Kafka's default 1 MB message limit, with the key
MANIFEST_PART = "manifest"
READ_RECORDS = 64


@dataclass(frozen=True)
class PublishedSnapshot:
    """The files of a complete snapshot and the chunk offset they cover."""

    offset: int
    files: dict[str, bytes]


def snapshot_records(
    snapshot_id: str,
    files: Mapping[str, bytes],
    identity: ModelIdentity,
    chunks_topic: str,
    offset: int,
    part_bytes: int = PART_BYTES,
) -> list[tuple[bytes, bytes]]:
    """(key, value) records of one snapshot: every file's parts in order, the manifest last."""
    records: list[tuple[bytes, bytes]] = []
    listing = []
    for name, data in sorted(files.items()):
        first = len(records)
        for start in range(0, max(len(data), 1), part_bytes):
            records.append(
                (f"{snapshot_id}/{len(records)}".encode(), data[start : start + part_bytes])
            )
        listing.append(
            {
                "name": name,
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "parts": [first, len(records)],
            }
        )
    manifest = {
        "format": FORMAT,
        "identity": identity.to_dict(),
        "chunks_topic": chunks_topic,
        "offset": offset,
        "files": listing,
    }
    records.append((f"{snapshot_id}/{MANIFEST_PART}".encode(), json.dumps(manifest).encode()))
    return records


def newest_complete(
    records: list[LogRecord], identity: ModelIdentity, chunks_topic: str
) -> tuple[PublishedSnapshot | None, list[str]]:
    """The newest snapshot of `identity` and `chunks_topic` that `records` hold whole, and why
    each newer manifest was passed over."""
    parts: dict[str, dict[str, bytes]] = {}
    manifests: list[tuple[str, bytes]] = []
    for record in records:
        snapshot_id, _, part = record.key.decode(errors="replace").partition("/")
        if record.value is None:
            continue
        if part == MANIFEST_PART:
            manifests.append((snapshot_id, record.value))
        else:
            parts.setdefault(snapshot_id, {})[part] = record.value
    passed_over: list[str] = []
    for snapshot_id, raw in reversed(manifests):
        try:
            found = _assemble(json.loads(raw), parts.get(snapshot_id, {}), identity, chunks_topic)
        except (ValueError, KeyError, TypeError) as err:
            passed_over.append(f"snapshot {snapshot_id}: unreadable manifest ({err})")
            continue
        if isinstance(found, str):
            passed_over.append(f"snapshot {snapshot_id}: {found}")
            continue
        return found, passed_over
    return None, passed_over


def _assemble(
    manifest: dict[str, Any],
    parts: dict[str, bytes],
    identity: ModelIdentity,
    chunks_topic: str,
) -> PublishedSnapshot | str:
    """The snapshot a manifest describes, or why it cannot be used."""
    if manifest["format"] != FORMAT:
        return f"format {manifest['format']} is not {FORMAT}"
    if manifest["chunks_topic"] != chunks_topic:
        return f"it covers {manifest['chunks_topic']}, not {chunks_topic}"
    if ModelIdentity.from_dict(manifest["identity"]) != identity:
        return "another embedding model identity made it"
    files: dict[str, bytes] = {}
    for entry in manifest["files"]:
        first, end = entry["parts"]
        missing = [n for n in range(first, end) if str(n) not in parts]
        if missing:
            return f"{len(missing)} part(s) of {entry['name']} are missing"
        data = b"".join(parts[str(n)] for n in range(first, end))
        if len(data) != entry["size"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            return f"{entry['name']} does not match its checksum"
        files[entry["name"]] = data
    return PublishedSnapshot(int(manifest["offset"]), files)


class SnapshotTopic:
    """One shard's partition of `snapshots.<generation>`: publish to it, fetch the newest."""

    def __init__(
        self,
        log_: Log,
        topic: str,
        shard: int,
        shards: int,
        chunks_topic: str,
        identity: ModelIdentity,
    ) -> None:
        self.log = log_
        self.topic = topic
        self.partition = shard
        self.shards = shards
        self.chunks_topic = chunks_topic
        self.identity = identity

    def publish(self, files: Mapping[str, bytes], offset: int) -> bool:
        """Append a snapshot covering chunk `offset`, then drop the older ones; False (and a
        warning) when the log cannot take it now: serving goes on, the next one may."""
        records = snapshot_records(
            uuid.uuid4().hex, files, self.identity, self.chunks_topic, offset
        )
        try:
            self.log.ensure_topic(self.topic, self.shards, compacted=False)
            offsets = self.log.append(self.topic, [(self.partition, k, v) for k, v in records])
            self.log.truncate(self.topic, self.partition, offsets[0])
        except RagIndexError as err:
            log.warning(
                "shard %d: snapshot not published to %s: %s", self.partition, self.topic, err
            )
            return False
        return True

    def ends_with_manifest(self) -> bool:
        """Whether the partition's last record is a manifest: a snapshot was appended whole
        (`fetch` still checks it). False while there is none or one is being appended."""
        try:
            begin, end = (
                self.log.begin_offset(self.topic, self.partition),
                self.log.end_offset(self.topic, self.partition),
            )
        except InvalidInput:
            return False  # nothing was ever published
        # Kafka's transaction markers take offsets: read a few before the end
        tail = self.log.read(self.topic, self.partition, max(begin, end - 8), max_records=8)
        return bool(tail) and tail[-1].key.endswith(f"/{MANIFEST_PART}".encode())

    def fetch(self) -> PublishedSnapshot | None:
        """The newest complete snapshot of this shard's identity and chunks topic, or None
        (logged) when there is none to use."""
        try:
            self.log.partitions(self.topic)
        except InvalidInput:
            return None  # nothing was ever published
        try:
            records = self._read_all()
        except RagIndexError as err:
            log.warning("shard %d: cannot read %s (%s); replaying", self.partition, self.topic, err)
            return None
        found, passed_over = newest_complete(records, self.identity, self.chunks_topic)
        for reason in passed_over:
            log.warning("shard %d: %s (in %s) is not used", self.partition, reason, self.topic)
        return found

    def _read_all(self) -> list[LogRecord]:
        out: list[LogRecord] = []
        offset = self.log.begin_offset(self.topic, self.partition)
        while True:
            batch = self.log.read(self.topic, self.partition, offset, max_records=READ_RECORDS)
            if not batch:
                return out
            out.extend(batch)
            offset = batch[-1].offset + 1
