"""The file log: the `Log` on one machine's disk (the embedded runtime's default).

Layout under the log directory:
- `state.json`: every topic's partition count and compaction flag, every partition's start and
  committed end offset, every consumer group's committed offsets. It is the commit point: it is
  replaced atomically (temp file, fsync, rename, fsync of the directory) after the records it
  covers are fsynced. Readers never look past a partition's committed end, so a record written
  but not committed (a crash, a failed write) is invisible, and the writer cuts such bytes off
  before it appends to that partition again.
- `<topic>/<partition>/<base offset>.seg`: checksummed segments (see `segments`).

Why one state file: `append_and_commit` must make records in several partitions and a group's
offsets visible together. The records are fsynced first; the rename of the state that names
their new ends and the group's offsets is the single atomic step. A crash before it leaves the
old state (the records are cut off on reopen, the group re-reads its input: nothing duplicated);
after it, both are there (nothing lost). Appends are atomic the same way.

One process writes a log directory at a time (an exclusive lock taken at its first write, a
clear `LogLocked` for a second writer); any number of processes read and tail it.
A write that fails midway (disk full, file too large) is cut back to the last committed record
before the error is raised, so nothing acknowledged later can sit behind a torn record; if even
the cut fails (or the commit's directory fsync does), the writer fences itself: each later write,
and each `writer_problem` check (/readyz), first reopens it as a restart would (fsync the
directory, re-read the committed state, cut every open partition back to it), and it stays
fenced, saying why, only while that fails.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import itertools
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragindex.errors import BackendUnavailable, InvalidInput, OffsetOutOfRange, RagIndexError
from ragindex.log import segments as seg
from ragindex.log.validation import check_consumed, check_records, check_topic_name
from ragindex.types import LogRecord

STATE_FILE = "state.json"
LOCK_FILE = "writer.lock"
_READ_CHUNK = 1 << 20
_READ_POSITIONS = 256  # read positions kept (the latest of each reader among them)
_POLL_S = 0.01


class LogLocked(RagIndexError):
    """Another process is the writer of this log directory; a log has exactly one writer."""


@dataclass
class _Active:
    """The writer's open tail segment of one partition."""

    base: int
    path: Path
    fd: int
    size: int


@dataclass(frozen=True)
class _ReadPosition:
    """Where a reader's last read of a partition stopped, so tailing never rescans a segment."""

    path: Path
    inode: int
    next_offset: int
    byte_pos: int


def _pkey(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


class FileLog:
    """A `Log` in a local directory: fsynced, checksummed segments and an atomic commit point."""

    def __init__(self, directory: Path, *, segment_bytes: int = 64 << 20) -> None:
        if segment_bytes < 1:
            raise InvalidInput("segment_bytes must be >= 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self._mutex = threading.Lock()
        self._lock_fd: int | None = None
        self._state: dict[str, Any] = {}
        self._active: dict[tuple[str, int], _Active] = {}
        self._fenced: str | None = None
        # where reads stopped, by (topic, partition, next offset): readers of one partition
        # at their own offsets (a dense replica and the BM25 view sharing this log) each read
        # on from their own position
        self._positions: dict[tuple[str, int, int], _ReadPosition] = {}
        self._positions_lock = threading.Lock()
        self._compacted_bytes: dict[tuple[str, int], int] = {}  # size after the last compaction

    # -- reading (any process) -----------------------------------------------------------

    def _read_state(self) -> dict[str, Any]:
        try:
            with open(self.directory / STATE_FILE, "rb") as f:
                state: dict[str, Any] = json.load(f)
        except FileNotFoundError:
            state = {}
        for section in ("topics", "partitions", "groups"):
            state.setdefault(section, {})
        return state

    def _topic(self, state: dict[str, Any], topic: str) -> dict[str, Any]:
        check_topic_name(topic)
        meta = state["topics"].get(topic)
        if meta is None:
            raise InvalidInput(f"no topic {topic!r} in the log at {self.directory}")
        return dict(meta)

    def _partition(self, state: dict[str, Any], topic: str, partition: int) -> dict[str, int]:
        meta = self._topic(state, topic)
        if not isinstance(partition, int) or not 0 <= partition < meta["partitions"]:
            raise InvalidInput(
                f"partition {partition!r} out of range for {topic} ({meta['partitions']})"
            )
        return dict(state["partitions"][_pkey(topic, partition)])

    def partitions(self, topic: str) -> int:
        return int(self._topic(self._read_state(), topic)["partitions"])

    def end_offset(self, topic: str, partition: int) -> int:
        return self._partition(self._read_state(), topic, partition)["end"]

    def begin_offset(self, topic: str, partition: int) -> int:
        """The oldest offset still readable (records before it were truncated away)."""
        return self._partition(self._read_state(), topic, partition)["start"]

    def committed(self, group: str, topic: str, partition: int) -> int:
        state = self._read_state()
        self._partition(state, topic, partition)
        return int(state["groups"].get(group, {}).get(_pkey(topic, partition), 0))

    def claim(self, group: str, topic: str, partition: int) -> int:
        self._partition(self._read_state(), topic, partition)
        with self._mutex:
            self._writable()  # one writer process per log: LogLocked while another holds it
        return self.committed(group, topic, partition)

    def read(
        self,
        topic: str,
        partition: int,
        from_offset: int,
        *,
        max_records: int = 1000,
        timeout_s: float = 0.0,
    ) -> list[LogRecord]:
        if max_records < 1:
            raise InvalidInput("max_records must be >= 1")
        if not isinstance(from_offset, int) or from_offset < 0:
            raise InvalidInput(f"from_offset must be an int >= 0, got {from_offset!r}")
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            bounds = self._partition(self._read_state(), topic, partition)
            if not bounds["start"] <= from_offset <= bounds["end"]:
                raise OffsetOutOfRange(
                    f"{topic}/{partition}: offset {from_offset} is outside "
                    f"[{bounds['start']}, {bounds['end']}]: restart from a snapshot or the start"
                )
            if from_offset < bounds["end"]:
                try:
                    return self._scan(topic, partition, from_offset, bounds["end"], max_records)
                except FileNotFoundError:  # a segment was truncated or compacted under us
                    continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            time.sleep(min(_POLL_S, remaining))

    def _scan(
        self, topic: str, partition: int, from_offset: int, end: int, max_records: int
    ) -> list[LogRecord]:
        directory = self.directory / topic / str(partition)
        found = seg.segments(directory)
        first = max([i for i, (base, _) in enumerate(found) if base <= from_offset] or [0])
        cached = self._position(topic, partition, from_offset)
        out: list[LogRecord] = []
        stopped = cached
        try:
            for _, path in found[first:]:
                start_pos = 0
                if cached and cached.path == path and os.stat(path).st_ino == cached.inode:
                    start_pos = cached.byte_pos
                with open(path, "rb") as f:
                    inode = os.fstat(f.fileno()).st_ino
                    for record, pos in _records_from(f, start_pos, partition):
                        if record.offset >= end:
                            return out
                        if record.offset >= from_offset and (
                            not out or record.offset > out[-1].offset
                        ):
                            out.append(record)
                            stopped = _ReadPosition(path, inode, record.offset + 1, pos)
                            if len(out) >= max_records:
                                return out
            return out
        finally:
            if stopped is not None:
                self._keep_position(topic, partition, stopped)

    def _position(self, topic: str, partition: int, offset: int) -> _ReadPosition | None:
        """Where a read that stopped before `offset` left off (kept for every reader that
        continues from there: views caught up to the same offset share it)."""
        with self._positions_lock:
            return self._positions.get((topic, partition, offset))

    def _keep_position(self, topic: str, partition: int, position: _ReadPosition) -> None:
        key = (topic, partition, position.next_offset)
        with self._positions_lock:
            self._positions.pop(key, None)  # the newest last: the oldest go first
            self._positions[key] = position
            while len(self._positions) > _READ_POSITIONS:
                del self._positions[next(iter(self._positions))]

    # -- writing (the one writer process) ------------------------------------------------

    def writer_problem(self) -> str | None:
        """Why this writer refuses writes now (fenced, and reopening failed), or None; a fenced
        writer is reopened first."""
        with self._mutex:
            if self._fenced and self._lock_fd is not None:
                with contextlib.suppress(BackendUnavailable):
                    self._reopen()
            return self._fenced

    def _writable(self) -> None:
        """Take the writer lock on first use; reopen a fenced writer (or refuse the write)."""
        if self._fenced:
            self._reopen()
        if self._lock_fd is not None:
            return
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogLocked(
                f"{self.directory}: another process is the writer of this log "
                "(one writer per log directory; readers need no lock)"
            ) from None
        self._lock_fd = fd
        self._state = self._read_state()

    def _reopen(self) -> None:
        """Recover a fenced writer as a restart would: settle the last commit's directory entry,
        re-read the committed state and cut every open partition back to it. Stays fenced,
        with the reason, if the disk still fails."""
        reopen = list(self._active)
        for act in self._active.values():
            with contextlib.suppress(OSError):
                os.close(act.fd)
        self._active.clear()
        try:
            seg.fsync_dir(self.directory)
            self._state = self._read_state()
            for topic, partition in reopen:
                if _pkey(topic, partition) in self._state["partitions"]:
                    self._open_active(topic, partition)
        except OSError as e:
            self._fenced = f"{self.directory}: the log writer is fenced and could not reopen: {e}"
            raise BackendUnavailable(self._fenced) from e
        self._fenced = None

    def _open_active(self, topic: str, partition: int) -> _Active:
        """The partition's tail segment, cut back to the committed end (recovery) on first use."""
        act = self._active.get((topic, partition))
        if act is not None:
            return act
        directory = self.directory / topic / str(partition)
        directory.mkdir(parents=True, exist_ok=True)
        end = self._state["partitions"][_pkey(topic, partition)]["end"]
        found = seg.segments(directory)
        for base, path in found:  # only a crash between roll and commit leaves such a segment
            if base > end:
                path.unlink()
        found = [(b, p) for b, p in found if b <= end]
        if not found:
            path = seg.segment_path(directory, end)
            found = [(end, path)]
        base, path = found[-1]
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            valid = 0
            with open(path, "rb") as f:
                for record, pos in _records_from(f, 0, partition):
                    if record.offset >= end:
                        break
                    valid = pos
            if os.fstat(fd).st_size != valid:  # uncommitted or torn bytes: never build on them
                os.ftruncate(fd, valid)
            os.fsync(fd)
            seg.fsync_dir(directory)
        except BaseException:
            os.close(fd)
            raise
        act = _Active(base, path, fd, valid)
        self._active[(topic, partition)] = act
        return act

    def _roll(self, topic: str, partition: int, act: _Active, *, compact: bool = True) -> _Active:
        end = self._state["partitions"][_pkey(topic, partition)]["end"]
        os.close(act.fd)
        path = seg.segment_path(act.path.parent, end)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.fsync(fd)
        seg.fsync_dir(act.path.parent)
        new = _Active(end, path, fd, 0)
        self._active[(topic, partition)] = new
        if compact and self._state["topics"][topic]["compacted"]:
            size = _partition_bytes(act.path.parent)
            last = self._compacted_bytes.setdefault((topic, partition), size)
            if compaction_due(size, last, self.segment_bytes):
                self._compact_locked(topic, partition)
        return new

    def _cut_back(self, touched: list[tuple[_Active, int]]) -> None:
        """Undo a failed write: truncate every touched segment to its last committed record."""
        try:
            for act, size in touched:
                os.ftruncate(act.fd, size)
                os.fsync(act.fd)
                act.size = size
        except OSError as e:
            self._fenced = (
                f"{self.directory}: the log writer is fenced: a failed write could not be cut "
                f"back ({e}); it reopens at the next write"
            )

    def _commit(self, state: dict[str, Any], touched: list[tuple[_Active, int]]) -> None:
        """Make `state` the committed state: the one atomic step of every write."""
        path = self.directory / STATE_FILE
        tmp = path.with_name(f".{STATE_FILE}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                seg.write_all(fd, json.dumps(state, sort_keys=True).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException as e:  # the old state stands: cut the records it does not cover
            self._cut_back(touched)
            raise _unavailable(self.directory, e) from e
        try:
            seg.fsync_dir(self.directory)
        except OSError as e:  # renamed but maybe not durable: neither undo nor acknowledge
            self._fenced = f"{self.directory}: the log writer is fenced: fsync failed ({e})"
            raise _unavailable(self.directory, e) from e
        self._state = state

    def ensure_topic(self, topic: str, partitions: int, *, compacted: bool) -> None:
        check_topic_name(topic)
        if not isinstance(partitions, int) or partitions < 1:
            raise InvalidInput(f"topic {topic}: partitions must be an int >= 1, got {partitions!r}")
        with self._mutex:
            existing = self._read_state()["topics"].get(topic)
            if existing is None:
                self._writable()
                existing = self._state["topics"].get(topic)
            if existing is not None:
                if existing["partitions"] != partitions or existing["compacted"] != compacted:
                    raise InvalidInput(
                        f"topic {topic} exists with {existing['partitions']} partitions "
                        f"(compacted={existing['compacted']}), not {partitions} "
                        f"(compacted={compacted})"
                    )
                return
            state = copy.deepcopy(self._state)
            state["topics"][topic] = {"partitions": partitions, "compacted": bool(compacted)}
            for p in range(partitions):
                (self.directory / topic / str(p)).mkdir(parents=True, exist_ok=True)
                state["partitions"][_pkey(topic, p)] = {"start": 0, "end": 0}
            seg.fsync_dir(self.directory)
            self._commit(state, [])

    def delete_topic(self, topic: str) -> None:
        check_topic_name(topic)
        with self._mutex:
            if topic not in self._read_state()["topics"]:
                return
            self._writable()
            state = copy.deepcopy(self._state)
            partitions = state["topics"].pop(topic)["partitions"]
            for p in range(partitions):
                del state["partitions"][_pkey(topic, p)]
                for offsets in state["groups"].values():
                    offsets.pop(_pkey(topic, p), None)
            self._commit(state, [])  # readers stop seeing it here; the files go after
            for p in range(partitions):
                act = self._active.pop((topic, p), None)
                if act is not None:
                    os.close(act.fd)
                with self._positions_lock:
                    for key in [k for k in self._positions if k[:2] == (topic, p)]:
                        del self._positions[key]
                self._compacted_bytes.pop((topic, p), None)
            shutil.rmtree(self.directory / topic, ignore_errors=True)
            seg.fsync_dir(self.directory)

    def append(self, topic: str, records: Sequence[tuple[int, bytes, bytes | None]]) -> list[int]:
        with self._mutex:
            return self._append(topic, records, None, {})

    def append_and_commit(
        self,
        topic: str,
        records: Sequence[tuple[int, bytes, bytes | None]],
        *,
        group: str,
        consumed: Mapping[tuple[str, int], int],
    ) -> list[int]:
        check_consumed(group, consumed)
        with self._mutex:
            return self._append(topic, records, group, consumed)

    def _append(
        self,
        topic: str,
        records: Sequence[tuple[int, bytes, bytes | None]],
        group: str | None,
        consumed: Mapping[tuple[str, int], int],
    ) -> list[int]:
        self._writable()
        meta = self._topic(self._state, topic)
        check_records(topic, records, meta["partitions"])
        state = copy.deepcopy(self._state)
        offsets: list[int] = []
        by_partition: dict[int, list[bytes]] = {}
        for partition, key, value in records:
            bounds = state["partitions"][_pkey(topic, partition)]
            offsets.append(bounds["end"])
            by_partition.setdefault(partition, []).append(seg.encode(bounds["end"], key, value))
            bounds["end"] += 1
        touched: list[tuple[_Active, int]] = []
        try:
            for partition, frames in by_partition.items():
                act = self._open_active(topic, partition)
                if act.size >= self.segment_bytes:
                    act = self._roll(topic, partition, act)
                touched.append((act, act.size))
                data = b"".join(frames)
                seg.write_all(act.fd, data)
                os.fsync(act.fd)
                act.size += len(data)
        except BaseException as e:
            self._cut_back(touched)
            raise _unavailable(self.directory, e) from e
        if group is not None:
            offsets_of_group = state["groups"].setdefault(group, {})
            for (t, p), offset in consumed.items():
                offsets_of_group[_pkey(t, p)] = offset
        if by_partition or group is not None:
            self._commit(state, touched)
        return offsets

    def truncate(self, topic: str, partition: int, before_offset: int) -> None:
        """Drop every record before `before_offset` (a snapshot covers them); whole old
        segments are deleted, and reading before the new start raises OffsetOutOfRange."""
        with self._mutex:
            self._writable()
            bounds = self._partition(self._state, topic, partition)
            if not isinstance(before_offset, int) or not 0 <= before_offset <= bounds["end"]:
                raise InvalidInput(
                    f"cannot truncate {topic}/{partition} before {before_offset!r}: "
                    f"it ends at {bounds['end']}"
                )
            if before_offset <= bounds["start"]:
                return
            state = copy.deepcopy(self._state)
            state["partitions"][_pkey(topic, partition)]["start"] = before_offset
            self._commit(state, [])
            directory = self.directory / topic / str(partition)
            found = seg.segments(directory)
            for (_, path), (next_base, _) in itertools.pairwise(found):
                if next_base <= before_offset:
                    path.unlink()
            seg.fsync_dir(directory)

    def compact(self, topic: str, partition: int) -> int:
        """Seal the partition's tail segment, then keep only the newest record of every key
        (a tombstone included) of a compacted topic; offsets never change. Returns how many
        records were dropped. The writer also compacts when it rolls a segment, once the
        partition doubled since its last compaction (`compaction_due`)."""
        with self._mutex:
            self._writable()
            if not self._topic(self._state, topic)["compacted"]:
                raise InvalidInput(f"topic {topic} is not compacted")
            self._partition(self._state, topic, partition)
            act = self._open_active(topic, partition)
            if act.size:
                self._roll(topic, partition, act, compact=False)
            return self._compact_locked(topic, partition)

    def _compact_locked(self, topic: str, partition: int) -> int:
        dropped = self._compact_sealed(topic, partition)
        directory = self.directory / topic / str(partition)
        self._compacted_bytes[(topic, partition)] = _partition_bytes(directory)
        return dropped

    def _compact_sealed(self, topic: str, partition: int) -> int:
        self._open_active(topic, partition)
        end = self._state["partitions"][_pkey(topic, partition)]["end"]
        found = seg.segments(self.directory / topic / str(partition))
        newest: dict[bytes, int] = {}
        for _, path in found:
            with open(path, "rb") as f:
                for record, _pos in _records_from(f, 0, partition):
                    if record.offset < end:
                        newest[record.key] = record.offset
        # Sealed segments (never the active one), merged into runs of up to segment_bytes so
        # that compaction does not leave ever more small files behind. Each run is rewritten
        # into its first segment (named by the lowest base, so offsets stay where readers look
        # for them), then the rest of the run is deleted; readers skip offsets they already
        # returned, so a read that overlaps the rewrite never yields a record twice.
        dropped, run_bytes = 0, 0
        run: list[tuple[Path, list[bytes], int]] = []
        for _, path in found[:-1]:
            with open(path, "rb") as f:
                records = [r for r, _pos in _records_from(f, 0, partition)]
            kept = [
                seg.encode(r.offset, r.key, r.value) for r in records if newest[r.key] == r.offset
            ]
            dropped += len(records) - len(kept)
            size = sum(map(len, kept))
            if run and run_bytes + size > self.segment_bytes:
                self._rewrite_run(run)
                run, run_bytes = [], 0
            run.append((path, kept, len(records)))
            run_bytes += size
        if run:
            self._rewrite_run(run)
        return dropped

    @staticmethod
    def _rewrite_run(run: list[tuple[Path, list[bytes], int]]) -> None:
        if len(run) == 1 and len(run[0][1]) == run[0][2]:
            return  # one segment, nothing dropped
        first = run[0][0]
        merged = b"".join(frame for _, kept, _ in run for frame in kept)
        if merged:
            seg.replace_durably(first, merged)
        else:
            first.unlink()
        for path, _, _ in run[1:]:
            path.unlink()
        seg.fsync_dir(first.parent)

    def close(self) -> None:
        with self._mutex:
            for act in self._active.values():
                os.close(act.fd)
            self._active.clear()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None


def compaction_due(size: int, compacted_size: int, segment_bytes: int) -> bool:
    """Whether a roll should compact a partition of `size` bytes that held `compacted_size`
    after its last compaction: once it doubled (Kafka's default dirty ratio, 0.5). A
    compaction reads the whole partition, so compacting at every roll made each append's I/O
    grow with the partition; this way every byte is read a bounded number of times."""
    return size >= 2 * max(compacted_size, segment_bytes)


def _partition_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for _, path in seg.segments(directory))


def _unavailable(directory: Path, error: BaseException) -> BaseException:
    """A failed write as the error callers act on (retry later); other errors pass through."""
    if isinstance(error, OSError):
        return BackendUnavailable(f"{directory}: the log could not take the write: {error}")
    return error


def _records_from(f: Any, pos: int, partition: int) -> Iterator[tuple[LogRecord, int]]:
    """Records of an open segment from byte `pos`, read in chunks; stops at a torn tail."""
    f.seek(pos)
    buf = b""
    while True:
        chunk = f.read(_READ_CHUNK)
        if not chunk:
            return
        buf += chunk
        used = 0
        for record, end in seg.scan(buf, partition):
            used = end
            yield record, pos + end
        buf = buf[used:]
        pos += used
        if len(buf) >= seg.HEADER.size:
            magic, length, _crc = seg.HEADER.unpack_from(buf)
            if magic != seg.MAGIC or len(buf) >= seg.HEADER.size + length:
                return  # corrupt, not merely incomplete
