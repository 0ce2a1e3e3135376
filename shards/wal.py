"""An append-only, fsynced, checksummed write-ahead log for one dense shard.

Why: an acknowledged upsert must survive a crash of any process, and every replica of a
shard must converge to it (DESIGN.md invariant 5). The writer appends and fsyncs before it
acknowledges; replicas (other processes) tail the same log from the offset their snapshot
covers.

Layout: a directory of segments named by their base offset (`{base:020d}.wal`). Offsets are
logical (base + position), so truncating after a snapshot deletes whole old segments and
never renumbers a record. A record is `magic | payload length | crc32 | payload`, the
payload `op | meta length | meta JSON | float32 vector bytes`. A reader stops at the first
incomplete or corrupt record (a torn tail from a crash mid-write); the writer cuts such a
tail off when it opens the log, before appending anything after it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragindex.errors import InvalidInput, RagIndexError
from ragindex.protocols import Vectors
from ragindex.shards.fsio import fsync_dir

MAGIC = b"RWAL"
_HEADER = struct.Struct("<4sII")  # magic, payload length, crc32 of payload
_PAYLOAD_HEAD = struct.Struct("<BI")  # op, meta length
_OP_UPSERT, _OP_DELETE = 1, 2
_SEGMENT = re.compile(r"^(\d{20})\.wal$")
LOCK_FILE = "writer.lock"


class WalTruncated(RagIndexError):
    """The requested offset was dropped by truncation; reload the newer snapshot first."""


class WalFenced(RagIndexError):
    """A failed append could not be cut back: reopen the log (recovery cuts the torn tail)."""


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd` (O_APPEND); raise on failure. Faults are injected here."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class WalLocked(RagIndexError):
    """Another writer holds this log; a shard has exactly one writer."""


@dataclass(frozen=True)
class UpsertRecord:
    tenant_id: str
    chunk_ids: tuple[str, ...]
    vectors: Vectors


@dataclass(frozen=True)
class DeleteRecord:
    tenant_id: str
    chunk_ids: tuple[str, ...]


WalRecord = UpsertRecord | DeleteRecord


def encode(record: WalRecord) -> bytes:
    """One framed record."""
    meta: dict[str, object] = {"tenant": record.tenant_id, "ids": list(record.chunk_ids)}
    body = b""
    if isinstance(record, UpsertRecord):
        vecs = np.ascontiguousarray(record.vectors, dtype="<f4")
        if vecs.ndim != 2 or vecs.shape[0] != len(record.chunk_ids):
            raise InvalidInput("upsert record needs one vector row per chunk id")
        meta["dim"] = int(vecs.shape[1])
        body = vecs.tobytes()
    meta_bytes = json.dumps(meta).encode()
    op = _OP_UPSERT if isinstance(record, UpsertRecord) else _OP_DELETE
    payload = _PAYLOAD_HEAD.pack(op, len(meta_bytes)) + meta_bytes + body
    return _HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def _decode_payload(payload: bytes) -> WalRecord:
    op, meta_len = _PAYLOAD_HEAD.unpack_from(payload)
    start = _PAYLOAD_HEAD.size
    meta = json.loads(payload[start : start + meta_len])
    ids = tuple(meta["ids"])
    if op == _OP_DELETE:
        return DeleteRecord(meta["tenant"], ids)
    vecs = np.frombuffer(payload, dtype="<f4", offset=start + meta_len)
    return UpsertRecord(meta["tenant"], ids, vecs.reshape(len(ids), meta["dim"]).astype(np.float32))


def _scan(data: bytes, pos: int) -> Iterator[tuple[WalRecord, int]]:
    """Records from `pos` with the position after each; stops at a torn or corrupt tail."""
    while pos + _HEADER.size <= len(data):
        magic, length, crc = _HEADER.unpack_from(data, pos)
        end = pos + _HEADER.size + length
        if magic != MAGIC or end > len(data):
            return
        payload = data[pos + _HEADER.size : end]
        if zlib.crc32(payload) != crc:
            return
        yield _decode_payload(payload), end
        pos = end


def _segments(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for path in directory.iterdir() if directory.exists() else []:
        m = _SEGMENT.match(path.name)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


def read_from(directory: Path, offset: int) -> Iterator[tuple[WalRecord, int]]:
    """Complete records at or after `offset`, each with the offset just past it.

    Raises WalTruncated if `offset` lies before the oldest segment still kept.
    """
    segments = _segments(directory)
    if not segments:
        if offset != 0:
            raise WalTruncated(f"{directory}: no log segments, cannot read from offset {offset}")
        return
    if offset < segments[0][0]:
        raise WalTruncated(
            f"{directory}: offset {offset} was truncated (oldest kept is {segments[0][0]})"
        )
    for i, (base, path) in enumerate(segments):
        next_base = segments[i + 1][0] if i + 1 < len(segments) else None
        if next_base is not None and next_base <= offset:
            continue
        start = max(offset - base, 0)
        try:
            with open(path, "rb") as f:  # read only what is new: replicas poll often
                f.seek(start)
                data = f.read()
        except FileNotFoundError:  # truncated under us by the writer
            raise WalTruncated(f"{directory}: segment {path.name} was truncated") from None
        end = 0
        for record, pos in _scan(data, 0):
            end = pos
            yield record, base + start + pos
        if next_base is None or base + start + end < next_base:
            return  # torn tail of the last segment, or end of the log


class WriteAheadLog:
    """The single writer of one shard's log (an exclusive file lock enforces one per shard)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise WalLocked(f"{directory}: another process is writing this shard's log") from None
        segments = _segments(directory)
        if not segments:
            segments = [(0, self._create_segment(0))]
        self._base, path = segments[-1]
        data = path.read_bytes()
        valid = 0
        for _record, pos in _scan(data, 0):
            valid = pos
        # Unbuffered: a failed write must leave no bytes in a buffer to be flushed later.
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        if valid < len(data):  # cut a torn tail so new records are not hidden behind it
            os.ftruncate(self._fd, valid)
            os.fsync(self._fd)
        self._size = valid
        self._fenced: str | None = None

    @property
    def end_offset(self) -> int:
        """The offset just past the last durable record."""
        return self._base + self._size

    def _create_segment(self, base: int) -> Path:
        path = self.directory / f"{base:020d}.wal"
        with open(path, "xb") as f:
            os.fsync(f.fileno())
        fsync_dir(self.directory)
        return path

    def append(self, records: Sequence[WalRecord]) -> int:
        """Append records in one write and fsync; returns the offset past the last one.

        A write that fails midway (disk full, file too large) is cut back to the last durable
        record before the error is raised, so no later acknowledged record can sit behind a
        torn one; if the cut fails too, the log refuses writes until it is reopened.
        """
        if self._fenced:
            raise WalFenced(self._fenced)
        data = b"".join(encode(r) for r in records)
        if data:
            try:
                write_all(self._fd, data)
                os.fsync(self._fd)
            except OSError:
                try:
                    os.ftruncate(self._fd, self._size)
                    os.fsync(self._fd)
                except OSError as cut:
                    self._fenced = f"{self.directory}: fenced after a failed append ({cut}); reopen"
                raise
            self._size += len(data)
        return self.end_offset

    def read_from(self, offset: int) -> Iterator[tuple[WalRecord, int]]:
        return read_from(self.directory, offset)

    def truncate(self, upto: int) -> None:
        """Drop records before `upto` (a snapshot covers them): roll, then delete old segments."""
        if not 0 <= upto <= self.end_offset:
            raise InvalidInput(f"cannot truncate to {upto}: log ends at {self.end_offset}")
        if self._size:
            os.close(self._fd)
            self._base, self._size = self.end_offset, 0
            self._fd = os.open(self._create_segment(self._base), os.O_WRONLY | os.O_APPEND)
        segments = _segments(self.directory)
        for i, (_base, path) in enumerate(segments[:-1]):
            if segments[i + 1][0] <= upto:
                path.unlink()

    def close(self) -> None:
        os.close(self._fd)
        os.close(self._lock_fd)
