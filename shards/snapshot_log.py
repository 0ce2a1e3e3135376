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

A snapshot is about the size of its shard's index (~1 GB per 500 k float32 vectors), so neither
side holds one whole in memory: the publisher streams its files from disk, APPEND_PARTS parts
per append (one Kafka transaction each; a reader passes over a snapshot whose manifest has not
come), and a reader spools the parts it reads to local files (`SnapshotSpool`) and assembles
the chosen snapshot's files from them, hashing as it copies.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ragindex.errors import InvalidInput, RagIndexError
from ragindex.protocols import Log
from ragindex.types import LogRecord, ModelIdentity

log = logging.getLogger("ragindex.shards")

FORMAT = 1
PART_BYTES = 512 * 1024  # far under Kafka's default 1 MB message limit, with the key
APPEND_PARTS = 32  # parts per append while publishing: 16 MiB of a snapshot in memory at once
MANIFEST_PART = "manifest"
READ_RECORDS = 32  # 16 MiB of parts a read


@dataclass(frozen=True)
class PublishedSnapshot:
    """The files of a complete snapshot, assembled on local disk, and the chunk offset they
    cover."""

    offset: int
    files: dict[str, Path]


def snapshot_records(
    snapshot_id: str,
    files: Mapping[str, Path],
    identity: ModelIdentity,
    chunks_topic: str,
    offset: int,
    part_bytes: int = PART_BYTES,
) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) records of one snapshot: every file's parts in order, read from disk one
    part at a time (an empty file is one empty part), the manifest last."""
    listing = []
    n = 0
    for name, path in sorted(files.items()):
        first, size, digest = n, 0, hashlib.sha256()
        with open(path, "rb") as f:
            while True:
                data = f.read(part_bytes)
                if not data and n > first:
                    break
                size += len(data)
                digest.update(data)
                yield f"{snapshot_id}/{n}".encode(), data
                n += 1
        listing.append(
            {"name": name, "size": size, "sha256": digest.hexdigest(), "parts": [first, n]}
        )
    manifest = {
        "format": FORMAT,
        "identity": identity.to_dict(),
        "chunks_topic": chunks_topic,
        "offset": offset,
        "files": listing,
    }
    yield f"{snapshot_id}/{MANIFEST_PART}".encode(), json.dumps(manifest).encode()


class SnapshotSpool:
    """A snapshots partition's records as they are read, in `directory` (local disk): each
    snapshot's parts appended to a file of its own, its manifests kept; then the newest
    complete snapshot's files assembled from them. Close it (or use it as a context manager)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._spools: dict[str, BinaryIO] = {}  # snapshot id -> its parts, in read order
        self._parts: dict[str, dict[str, tuple[int, int]]] = {}  # id -> part -> (at, size)
        self._manifests: list[tuple[str, bytes]] = []

    def __enter__(self) -> SnapshotSpool:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for spool in self._spools.values():
            spool.close()

    def add(self, records: Iterable[LogRecord]) -> None:
        for record in records:
            snapshot_id, _, part = record.key.decode(errors="replace").partition("/")
            if record.value is None:
                continue
            if part == MANIFEST_PART:
                self._manifests.append((snapshot_id, record.value))
                continue
            spool = self._spools.get(snapshot_id)
            if spool is None:  # ids come from the log: never part of a file name
                spool = open(self.directory / f"parts-{len(self._spools)}", "w+b")  # noqa: SIM115
                self._spools[snapshot_id] = spool
            at = spool.seek(0, os.SEEK_END)
            spool.write(record.value)
            self._parts.setdefault(snapshot_id, {})[part] = (at, len(record.value))

    def newest_complete(
        self, identity: ModelIdentity, chunks_topic: str
    ) -> tuple[PublishedSnapshot | None, list[str]]:
        """The newest snapshot of `identity` and `chunks_topic` held whole, its files written
        (fsynced) under the spool's directory, and why each newer manifest was passed over."""
        passed_over: list[str] = []
        for n, (snapshot_id, raw) in enumerate(reversed(self._manifests)):
            try:
                found = self._assemble(
                    json.loads(raw), snapshot_id, identity, chunks_topic, self.directory / f"s{n}"
                )
            except (ValueError, KeyError, TypeError) as err:
                passed_over.append(f"snapshot {snapshot_id}: unreadable manifest ({err})")
                continue
            if isinstance(found, str):
                passed_over.append(f"snapshot {snapshot_id}: {found}")
                continue
            return found, passed_over
        return None, passed_over

    def _assemble(
        self,
        manifest: dict[str, Any],
        snapshot_id: str,
        identity: ModelIdentity,
        chunks_topic: str,
        out: Path,
    ) -> PublishedSnapshot | str:
        """The snapshot a manifest describes, written into `out`, or why it cannot be used."""
        if manifest["format"] != FORMAT:
            return f"format {manifest['format']} is not {FORMAT}"
        if manifest["chunks_topic"] != chunks_topic:
            return f"it covers {manifest['chunks_topic']}, not {chunks_topic}"
        if ModelIdentity.from_dict(manifest["identity"]) != identity:
            return "another embedding model identity made it"
        strange = [
            e["name"] for e in manifest["files"] if "/" in e["name"] or e["name"][:1] in ("", ".")
        ]
        if strange:
            return f"it names files outside its directory: {strange}"
        parts = self._parts.get(snapshot_id, {})
        out.mkdir()
        files: dict[str, Path] = {}
        for entry in manifest["files"]:
            first, end = entry["parts"]
            missing = [n for n in range(first, end) if str(n) not in parts]
            if missing:
                return f"{len(missing)} part(s) of {entry['name']} are missing"
            spool = self._spools[snapshot_id]
            path, size, digest = out / entry["name"], 0, hashlib.sha256()
            with open(path, "wb") as f:
                for n in range(first, end):
                    at, length = parts[str(n)]
                    spool.seek(at)
                    data = spool.read(length)
                    size += len(data)
                    digest.update(data)
                    f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if size != entry["size"] or digest.hexdigest() != entry["sha256"]:
                return f"{entry['name']} does not match its checksum"
            files[entry["name"]] = path
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

    def publish(self, files: Mapping[str, Path], offset: int) -> bool:
        """Append a snapshot of `files` (name -> path) covering chunk `offset`, then drop the
        older ones; False (and a warning) when the log cannot take it now: serving goes on, the
        next one may."""
        records = snapshot_records(
            uuid.uuid4().hex, files, self.identity, self.chunks_topic, offset
        )
        try:
            self.log.ensure_topic(self.topic, self.shards, compacted=False)
            first: int | None = None
            for batch in _batches(records, APPEND_PARTS):
                offsets = self.log.append(self.topic, [(self.partition, k, v) for k, v in batch])
                first = offsets[0] if first is None else first
            assert first is not None  # the manifest at least
            self.log.truncate(self.topic, self.partition, first)
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

    def fetch(self, spool: Path) -> PublishedSnapshot | None:
        """The newest complete snapshot of this shard's identity and chunks topic, its files
        assembled in `spool` (a directory on local disk the caller makes empty and removes), or
        None (logged) when there is none to use."""
        try:
            self.log.partitions(self.topic)
        except InvalidInput:
            return None  # nothing was ever published
        with SnapshotSpool(spool) as spooled:
            try:
                offset = self.log.begin_offset(self.topic, self.partition)
                while batch := self.log.read(
                    self.topic, self.partition, offset, max_records=READ_RECORDS
                ):
                    spooled.add(batch)
                    offset = batch[-1].offset + 1
            except RagIndexError as err:
                log.warning(
                    "shard %d: cannot read %s (%s); replaying", self.partition, self.topic, err
                )
                return None
            found, passed_over = spooled.newest_complete(self.identity, self.chunks_topic)
        for reason in passed_over:
            log.warning("shard %d: %s (in %s) is not used", self.partition, reason, self.topic)
        return found


def _batches(
    records: Iterator[tuple[bytes, bytes]], size: int
) -> Iterator[list[tuple[bytes, bytes]]]:
    batch: list[tuple[bytes, bytes]] = []
    for record in records:
        batch.append(record)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
