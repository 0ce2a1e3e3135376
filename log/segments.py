"""Segment files of one file-log partition: framing, scanning and durable writes.

A partition is a directory of segments named by the offset of their first record
(`{base:020d}.seg`). A record is `magic | payload length | crc32 | payload`, the payload
`offset | key length | value length (-1: tombstone) | key | value`. Offsets are logical record
numbers stored in the record itself, so compaction can drop records without renumbering the
rest and truncation deletes whole old segments. A scan stops at the first incomplete or corrupt
record: a torn tail left by a crash or a failed write is never read as data.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from ragindex.types import LogRecord

MAGIC = b"RLOG"
HEADER = struct.Struct("<4sII")  # magic, payload length, crc32 of payload
_PAYLOAD_HEAD = struct.Struct("<QIi")  # offset, key length, value length (-1 = tombstone)
_SEGMENT = re.compile(r"^(\d{20})\.seg$")


def encode(offset: int, key: bytes, value: bytes | None) -> bytes:
    """One framed record."""
    body = key if value is None else key + value
    payload = _PAYLOAD_HEAD.pack(offset, len(key), -1 if value is None else len(value)) + body
    return HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def scan(data: bytes, partition: int) -> Iterator[tuple[LogRecord, int]]:
    """Records in `data` with the byte position just after each; stops at a torn or corrupt tail."""
    pos = 0
    while pos + HEADER.size <= len(data):
        magic, length, crc = HEADER.unpack_from(data, pos)
        end = pos + HEADER.size + length
        if magic != MAGIC or end > len(data) or length < _PAYLOAD_HEAD.size:
            return
        if zlib.crc32(data[pos + HEADER.size : end]) != crc:
            return
        offset, key_len, value_len = _PAYLOAD_HEAD.unpack_from(data, pos + HEADER.size)
        k = pos + HEADER.size + _PAYLOAD_HEAD.size
        value = None if value_len < 0 else data[k + key_len : k + key_len + value_len]
        yield LogRecord(partition, offset, data[k : k + key_len], value), end
        pos = end


def segment_path(directory: Path, base: int) -> Path:
    return directory / f"{base:020d}.seg"


def segments(directory: Path) -> list[tuple[int, Path]]:
    """(base offset, path) of every segment, oldest first."""
    found = []
    for path in directory.iterdir() if directory.exists() else []:
        m = _SEGMENT.match(path.name)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` at the end of `fd` (an O_APPEND descriptor); raise on failure.

    The one place the file log writes record bytes, so tests can inject a failed write here.
    """
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(directory: Path) -> None:
    """Make new names, renames and deletions inside `directory` survive a power cut."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(path: Path, data: bytes) -> None:
    """Write a temp file beside `path`, fsync it, rename it over `path`, fsync the directory.

    A reader sees the old content or the new, never half of either.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
