"""The file log: the shared Log contract, plus what only a local directory can show (the
writer lock, recovery from torn and uncommitted bytes, a failed write, segments on disk)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from unittest import mock

import pytest

from ragindex.errors import BackendUnavailable
from ragindex.log import FileLog, LogLocked
from ragindex.log import segments as seg
from ragindex.protocols import Log
from ragindex.testing import LogContract, read_all


class TestFileLogContract(LogContract):
    @pytest.fixture
    def log(self, tmp_path: Path) -> Iterator[Log]:
        log = FileLog(tmp_path / "log")
        yield log
        log.close()

    @pytest.fixture
    def reopen(self) -> Callable[[Log], Log]:
        def reopen(log: Log) -> Log:
            assert isinstance(log, FileLog)
            log.close()
            return FileLog(log.directory)

        return reopen

    @pytest.fixture
    def failing_commit(self) -> Callable[[Log], AbstractContextManager[object]]:
        def failing(log: Log) -> AbstractContextManager[object]:
            # The records are written and fsynced; the commit point (the state rename) fails.
            return mock.patch("os.replace", side_effect=OSError(errno.EIO, "injected"))

        return failing

    @pytest.fixture
    def force_compaction(self) -> Callable[[Log, str, int], None]:
        def compact(log: Log, topic: str, partition: int) -> None:
            assert isinstance(log, FileLog)
            assert log.compact(topic, partition) > 0

        return compact


def _short_write_then(code: int) -> Callable[[int, bytes], None]:
    """A write that puts half its bytes on disk and then fails, like a full disk does."""

    def write(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])
        raise OSError(code, os.strerror(code))

    return write


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_failed_append_never_hides_later_acknowledged_records(tmp_path: Path, code: int) -> None:
    """#14: a torn record left by a failed write must not swallow what is acknowledged after."""
    log = FileLog(tmp_path)
    log.ensure_topic("t", 1, compacted=False)
    first = log.append("t", [(0, b"a", b"1" * 100)])
    with (
        mock.patch.object(seg, "write_all", _short_write_then(code)),
        pytest.raises(BackendUnavailable, match=os.strerror(code)),
    ):
        log.append("t", [(0, b"b", b"2" * 1000)])
    later = log.append("t", [(0, b"c", b"3" * 100)])  # acknowledged after the failure
    assert [r.key for r in read_all(log, "t", 0)] == [b"a", b"c"]
    log.close()
    reopened = FileLog(tmp_path)
    assert [(r.offset, r.key) for r in read_all(reopened, "t", 0)] == [
        (first[0], b"a"),
        (later[0], b"c"),
    ]
    reopened.close()


def _torn_write_that_cannot_be_cut_back(log: FileLog) -> None:
    """A write fails half way (disk full) and cutting it back fails too (I/O error)."""
    with (
        mock.patch.object(seg, "write_all", _short_write_then(errno.ENOSPC)),
        mock.patch("os.ftruncate", side_effect=OSError(errno.EIO, "injected")),
        pytest.raises(BackendUnavailable),
    ):
        log.append("t", [(0, b"b", b"2" * 1000)])


def test_a_writer_that_cannot_cut_back_reopens_itself_once_the_disk_recovers(
    tmp_path: Path,
) -> None:
    """A fenced writer used to refuse every write until the process restarted."""
    log = FileLog(tmp_path)
    log.ensure_topic("t", 1, compacted=False)
    log.append("t", [(0, b"a", b"1")])
    _torn_write_that_cannot_be_cut_back(log)
    with (
        mock.patch("os.ftruncate", side_effect=OSError(errno.EIO, "still failing")),
        pytest.raises(BackendUnavailable, match=r"fenced.*still failing"),
    ):
        log.append("t", [(0, b"c", b"3")])
    later = log.append("t", [(0, b"d", b"4")])  # the disk works again: no restart needed
    assert [r.key for r in read_all(log, "t", 0)] == [b"a", b"d"]
    log.close()
    reopened = FileLog(tmp_path)  # the torn bytes were cut: nothing hides behind them
    assert [(r.offset, r.key) for r in read_all(reopened, "t", 0)] == [(0, b"a"), (later[0], b"d")]
    reopened.close()


def test_a_fenced_writer_says_why_until_it_could_reopen(tmp_path: Path) -> None:
    """/readyz asks `writer_problem`: a read alone answered "ok" while every write failed."""
    log = FileLog(tmp_path)
    log.ensure_topic("t", 1, compacted=False)
    log.append("t", [(0, b"a", b"1")])
    assert log.writer_problem() is None
    _torn_write_that_cannot_be_cut_back(log)
    with mock.patch("os.ftruncate", side_effect=OSError(errno.EIO, "still failing")):
        problem = log.writer_problem()
    assert problem is not None and "fenced" in problem and "still failing" in problem
    assert log.writer_problem() is None  # the check itself reopened the writer
    log.append("t", [(0, b"c", b"3")])
    assert [r.key for r in read_all(log, "t", 0)] == [b"a", b"c"]
    log.close()


def test_uncommitted_and_torn_bytes_are_invisible_and_cut_on_reopen(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    log.ensure_topic("t", 1, compacted=False)
    log.append("t", [(0, b"a", b"1")])
    log.close()
    segment = seg.segments(tmp_path / "t" / "0")[-1][1]
    committed_size = segment.stat().st_size
    with open(segment, "ab") as f:  # a crash after the fsync of records, before the commit
        f.write(seg.encode(1, b"uncommitted", b"x") + seg.encode(2, b"torn", b"y")[:9])
    reader = FileLog(tmp_path)
    assert [r.key for r in read_all(reader, "t", 0)] == [b"a"]
    assert reader.end_offset("t", 0) == 1
    reader.append("t", [(0, b"b", b"2")])
    assert [(r.offset, r.key) for r in read_all(reader, "t", 0)] == [(0, b"a"), (1, b"b")]
    assert segment.stat().st_size > committed_size
    reader.close()


def test_one_writer_per_directory_and_readers_need_no_lock(tmp_path: Path) -> None:
    writer = FileLog(tmp_path)
    writer.ensure_topic("t", 1, compacted=False)
    writer.append("t", [(0, b"a", b"1")])
    code = (
        "import sys; from pathlib import Path; from ragindex.log import FileLog, LogLocked\n"
        "log = FileLog(Path(sys.argv[1]))\n"
        "print([r.value.decode() for r in log.read('t', 0, 0, timeout_s=5)])\n"
        "try:\n    log.append('t', [(0, b'x', b'y')])\nexcept LogLocked as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "['1']"
    assert "another process is the writer" in out.stdout
    with pytest.raises(LogLocked):
        FileLog(tmp_path).append("t", [(0, b"x", b"y")])
    writer.close()


def test_segments_roll_compact_and_truncate_on_disk(tmp_path: Path) -> None:
    log = FileLog(tmp_path, segment_bytes=300)
    log.ensure_topic("t", 1, compacted=True)
    for cold in range(20):  # each segment ends up holding one cold key among hot updates
        log.append("t", [(0, f"cold{cold}".encode(), b"c")])
        for i in range(10):
            log.append("t", [(0, b"hot", f"h{cold}.{i}".encode())])
    directory = tmp_path / "t" / "0"
    kept = read_all(log, "t", 0)
    newest = {f"cold{c}".encode(): b"c" for c in range(20)} | {b"hot": b"h19.9"}
    assert {r.key: r.value for r in kept} == newest
    assert len(kept) < 60  # rolling compacted the sealed segments by itself...
    assert len(seg.segments(directory)) <= 6  # ...and merged them: no pile of small files
    before, end = len(seg.segments(directory)), log.end_offset("t", 0)
    log.truncate("t", 0, end - 3)
    assert len(seg.segments(directory)) < before
    assert [r.offset for r in read_all(log, "t", 0, end - 3)] == [
        r.offset for r in kept if r.offset >= end - 3
    ]
    log.close()


def _bytes_read_by_this_process() -> int:
    """Bytes this process read through read(2) and the like so far (Linux's rchar)."""
    io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(io["rchar"])


def test_appends_read_a_bounded_multiple_of_the_partition_however_long_it_grows(
    tmp_path: Path,
) -> None:
    """Every roll of a compacted partition used to reread the whole partition twice to
    compact it: the I/O of an append grew with the partition, quadratic over its life."""
    log = FileLog(tmp_path, segment_bytes=4096)
    log.ensure_topic("t", 1, compacted=True)
    before = _bytes_read_by_this_process()
    for i in range(2000):  # ~470 KB in ~115 segments, every key distinct: nothing to drop
        log.append("t", [(0, f"key{i}".encode(), b"v" * 200)])
    read = _bytes_read_by_this_process() - before
    size = sum(path.stat().st_size for _, path in seg.segments(tmp_path / "t" / "0"))
    assert read < 8 * size, f"appends read {read} bytes of a {size}-byte partition"
    assert len(read_all(log, "t", 0)) == 2000
    log.close()


@pytest.mark.parametrize("apart", [2000, 0])
def test_readers_of_one_partition_each_read_on_from_where_they_stopped(
    tmp_path: Path, apart: int
) -> None:
    """A dense replica and the BM25 view tail one partition through one FileLog, at their own
    offsets or caught up to the same one: a read position kept for the last reader only sent
    every other read back to the segment's first byte (I/O quadratic in the partition)."""
    log = FileLog(tmp_path)
    log.ensure_topic("t", 1, compacted=False)
    total = 4000
    for start in range(0, total, 500):  # ~8 MB in one segment
        log.append("t", [(0, f"k{i}".encode(), b"v" * 2000) for i in range(start, start + 500)])
    size = sum(path.stat().st_size for _, path in seg.segments(tmp_path / "t" / "0"))
    offsets = {"dense": total - 2000 - apart, "bm25": total - 2000}
    before = _bytes_read_by_this_process()
    while offsets["bm25"] < total:
        for reader, offset in offsets.items():
            records = log.read("t", 0, offset, max_records=100)
            assert [r.offset for r in records] == list(range(offset, offset + 100))
            offsets[reader] = offset + 100
    read = _bytes_read_by_this_process() - before
    assert read < 8 * size, f"reads of 100 records read {read} bytes of a {size}-byte partition"
    log.close()


_EFBIG_SCRIPT = """
import resource, sys
from pathlib import Path
from ragindex.errors import BackendUnavailable
from ragindex.log import FileLog
from ragindex.log import segments as seg

log = FileLog(Path(sys.argv[1]))
log.ensure_topic("t", 1, compacted=False)
log.append("t", [(0, b"a", b"1" * 100)])
size = seg.segments(Path(sys.argv[1]) / "t" / "0")[-1][1].stat().st_size
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1000, hard))  # Python ignores SIGXFSZ
try:
    log.append("t", [(0, b"b", b"2" * 5000)])  # a short write, then EFBIG
except BackendUnavailable as e:
    print("refused:", e)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # the disk has room again
print("later:", log.append("t", [(0, b"c", b"3" * 100)]))
"""


def test_a_real_file_size_limit_tears_a_write_and_nothing_acknowledged_is_lost(
    tmp_path: Path,
) -> None:
    """No mock: RLIMIT_FSIZE makes the kernel cut the write short, then refuse it (EFBIG)."""
    out = subprocess.run(
        [sys.executable, "-c", _EFBIG_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout and "File too large" in out.stdout
    log = FileLog(tmp_path)
    assert [(r.key, len(r.value or b"")) for r in read_all(log, "t", 0)] == [
        (b"a", 100),
        (b"c", 100),
    ]
    log.close()
