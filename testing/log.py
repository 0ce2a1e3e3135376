"""The contract of the `Log` protocol, inherited by every implementation's test class.

A subclass provides the fixtures marked abstract below (`log`, `reopen`, `failing_commit`,
`force_compaction`); every test here then runs against that implementation unchanged
(`FileLog`: tests/log/test_file_log.py, `KafkaLog`: tests/log/test_kafka_log.py).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest

from ragindex.errors import BackendUnavailable, InvalidInput, OffsetOutOfRange
from ragindex.protocols import Log
from ragindex.types import LogRecord


def read_all(log: Log, topic: str, partition: int, from_offset: int = 0) -> list[LogRecord]:
    """Every committed record from `from_offset` to the end, in bounded reads."""
    out: list[LogRecord] = []
    end = log.end_offset(topic, partition)
    offset = from_offset
    deadline = time.monotonic() + 30
    while offset < end and time.monotonic() < deadline:
        batch = log.read(topic, partition, offset, max_records=100, timeout_s=1.0)
        if not batch:
            break
        out.extend(batch)
        offset = batch[-1].offset + 1
    return out


class WrittenWhileRead:
    """A log that a steady writer appends to while it is read: after each read, one more
    record (`record(n)`, n counting from 0) lands at the partition's end, up to `writes`
    times. A view that chased the end would apply all of them in one catch-up."""

    def __init__(
        self, log: Log, record: Callable[[int], tuple[int, bytes, bytes | None]], writes: int
    ) -> None:
        self.inner, self.record, self.writes, self.written = log, record, writes, 0

    def read(
        self,
        topic: str,
        partition: int,
        from_offset: int,
        *,
        max_records: int = 1000,
        timeout_s: float = 0.0,
    ) -> list[LogRecord]:
        records = self.inner.read(
            topic, partition, from_offset, max_records=max_records, timeout_s=timeout_s
        )
        if self.written < self.writes:
            self.inner.append(topic, [self.record(self.written)])
            self.written += 1
        return records

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


class LogContract:
    @pytest.fixture
    def log(self) -> Iterator[Log]:
        raise NotImplementedError("the implementation's test module provides a fresh Log")

    @pytest.fixture
    def reopen(self) -> Callable[[Log], Log]:
        """Close a log and open a new client of the same storage (a restarted process)."""
        raise NotImplementedError

    @pytest.fixture
    def failing_commit(self) -> Callable[[Log], AbstractContextManager[object]]:
        """Within the context, append_and_commit fails after its records were written."""
        raise NotImplementedError

    @pytest.fixture
    def force_compaction(self) -> Callable[[Log, str, int], None]:
        """Make the log compact a partition of a compacted topic now (bounded)."""
        raise NotImplementedError

    @pytest.fixture
    def topic(self) -> str:
        return f"contract.{uuid.uuid4().hex[:12]}"

    # -- topics -----------------------------------------------------------------------------

    def test_ensure_topic_is_idempotent(self, log: Log, topic: str) -> None:
        log.ensure_topic(topic, 3, compacted=True)
        log.ensure_topic(topic, 3, compacted=True)
        assert log.partitions(topic) == 3
        assert [log.end_offset(topic, p) for p in range(3)] == [0, 0, 0]

    def test_partition_mismatch_is_refused(self, log: Log, topic: str) -> None:
        log.ensure_topic(topic, 2, compacted=True)
        with pytest.raises(InvalidInput, match="2 partitions"):
            log.ensure_topic(topic, 4, compacted=True)
        assert log.partitions(topic) == 2

    def test_unknown_topic_and_bad_input_are_refused(self, log: Log, topic: str) -> None:
        with pytest.raises(InvalidInput, match="topic"):
            log.partitions(topic)
        with pytest.raises(InvalidInput, match="topic name"):
            log.ensure_topic("bad/name", 1, compacted=False)
        log.ensure_topic(topic, 1, compacted=False)
        with pytest.raises(InvalidInput, match="out of range"):
            log.append(topic, [(0, b"k", b"v"), (1, b"k", b"v")])
        with pytest.raises(InvalidInput, match="key"):
            log.append(topic, [(0, "k", b"v")])  # type: ignore[list-item]
        assert log.end_offset(topic, 0) == 0  # a refused batch wrote nothing

    def test_delete_topic_removes_records_and_offsets(self, log: Log, topic: str) -> None:
        log.ensure_topic(topic, 2, compacted=True)
        log.append_and_commit(topic, [(1, b"k", b"v")], group="g", consumed={(topic, 0): 3})
        log.delete_topic(topic)
        log.delete_topic(topic)  # deleting what is gone is no error
        with pytest.raises(InvalidInput, match="topic"):
            log.partitions(topic)

    # -- append and read --------------------------------------------------------------------

    def test_append_returns_increasing_offsets(self, log: Log, topic: str) -> None:
        log.ensure_topic(topic, 2, compacted=False)
        first = log.append(topic, [(0, b"a", b"1"), (1, b"b", b"2"), (0, b"c", b"3")])
        second = log.append(topic, [(0, b"d", b"4")])
        assert first[0] < first[2] < second[0]
        # Offsets may have gaps (Kafka's transaction markers take one), never go backwards.
        assert log.end_offset(topic, 0) > second[0]
        assert log.end_offset(topic, 1) > first[1]
        got = read_all(log, topic, 0)
        assert [(r.offset, r.key, r.value) for r in got] == [
            (first[0], b"a", b"1"),
            (first[2], b"c", b"3"),
            (second[0], b"d", b"4"),
        ]
        assert all(r.partition == 0 for r in got)

    def test_read_from_middle_past_end_and_with_timeout(self, log: Log, topic: str) -> None:
        log.ensure_topic(topic, 1, compacted=False)
        offsets = log.append(topic, [(0, f"k{i}".encode(), f"v{i}".encode()) for i in range(10)])
        middle = read_all(log, topic, 0, offsets[4])
        assert [r.value for r in middle] == [f"v{i}".encode() for i in range(4, 10)]
        assert len(log.read(topic, 0, offsets[0], max_records=3, timeout_s=5)) == 3
        # Caught up: reading after the last record returns nothing, again and again (the
        # end offset may lie further: a caller is caught up when a read returns nothing).
        after_last = offsets[-1] + 1
        started = time.monotonic()
        assert log.read(topic, 0, after_last, timeout_s=0.3) == []
        assert time.monotonic() - started >= 0.25  # it waited for a record that never came
        assert log.read(topic, 0, after_last) == []
        assert log.read(topic, 0, after_last, timeout_s=0.1) == []
        assert log.read(topic, 0, log.end_offset(topic, 0)) == []
        with pytest.raises(OffsetOutOfRange):
            log.read(topic, 0, log.end_offset(topic, 0) + 100, timeout_s=1)

    def test_keyed_records_and_tombstones(self, log: Log, topic: str) -> None:
        log.ensure_topic(topic, 1, compacted=True)
        log.append(topic, [(0, b"doc", b"v1"), (0, b"doc", None)])
        got = read_all(log, topic, 0)
        assert [(r.key, r.value) for r in got] == [(b"doc", b"v1"), (b"doc", None)]

    def test_compaction_keeps_newest_per_key_with_stable_offsets(
        self, log: Log, topic: str, force_compaction: Callable[[Log, str, int], None]
    ) -> None:
        log.ensure_topic(topic, 1, compacted=True)
        old = log.append(topic, [(0, b"a", b"a1"), (0, b"b", b"b1"), (0, b"c", b"c1")])
        new = log.append(topic, [(0, b"a", b"a2"), (0, b"c", None)])
        force_compaction(log, topic, 0)
        got = {(r.offset, r.key, r.value) for r in read_all(log, topic, 0)}
        # Compaction dropped the superseded records and kept every key's newest, at its offset.
        assert (old[0], b"a", b"a1") not in got and (old[2], b"c", b"c1") not in got
        assert {(old[1], b"b", b"b1"), (new[0], b"a", b"a2"), (new[1], b"c", None)} <= got

    # -- commit -----------------------------------------------------------------------------

    def test_append_and_commit_makes_both_visible(self, log: Log, topic: str) -> None:
        source, sink = f"{topic}.in", f"{topic}.out"
        log.ensure_topic(source, 2, compacted=True)
        log.ensure_topic(sink, 1, compacted=True)
        assert log.committed("workers", source, 1) == 0
        offsets = log.append_and_commit(
            sink, [(0, b"x", b"1"), (0, b"y", b"2")], group="workers", consumed={(source, 1): 7}
        )
        assert log.committed("workers", source, 1) == 7
        assert log.committed("workers", source, 0) == 0
        assert log.committed("others", source, 1) == 0  # offsets are per group
        assert [r.offset for r in read_all(log, sink, 0)] == offsets

    def test_claim_resumes_from_the_committed_offset(self, log: Log, topic: str) -> None:
        source, sink = f"{topic}.in", f"{topic}.out"
        log.ensure_topic(source, 2, compacted=True)
        log.ensure_topic(sink, 1, compacted=True)
        assert log.claim("workers", source, 0) == 0
        log.append_and_commit(sink, [(0, b"x", b"1")], group="workers", consumed={(source, 0): 5})
        assert log.claim("workers", source, 0) == 5  # claiming again is harmless
        log.append_and_commit(sink, [(0, b"y", b"2")], group="workers", consumed={(source, 0): 6})
        assert log.committed("workers", source, 0) == 6
        with pytest.raises(InvalidInput, match="out of range"):
            log.claim("workers", source, 2)

    def test_failed_append_and_commit_leaves_neither(
        self,
        log: Log,
        topic: str,
        failing_commit: Callable[[Log], AbstractContextManager[object]],
    ) -> None:
        source, sink = f"{topic}.in", f"{topic}.out"
        log.ensure_topic(source, 1, compacted=True)
        log.ensure_topic(sink, 1, compacted=True)
        log.append_and_commit(sink, [(0, b"a", b"1")], group="g", consumed={(source, 0): 1})
        with failing_commit(log), pytest.raises(BackendUnavailable):
            log.append_and_commit(sink, [(0, b"b", b"2")], group="g", consumed={(source, 0): 2})
        assert log.committed("g", source, 0) == 1
        assert [r.key for r in read_all(log, sink, 0)] == [b"a"]
        log.append_and_commit(sink, [(0, b"c", b"3")], group="g", consumed={(source, 0): 2})
        assert log.committed("g", source, 0) == 2
        assert [r.key for r in read_all(log, sink, 0)] == [b"a", b"c"]  # the failed "b" never

    # -- truncation, durability, concurrency ------------------------------------------------

    def test_truncated_offsets_are_out_of_range(self, log: Log, topic: str) -> None:
        log.ensure_topic(topic, 1, compacted=False)
        offsets = log.append(topic, [(0, f"k{i}".encode(), b"v") for i in range(6)])
        log.truncate(topic, 0, offsets[3])
        assert log.begin_offset(topic, 0) == offsets[3]
        with pytest.raises(OffsetOutOfRange):
            log.read(topic, 0, offsets[1])
        assert [r.offset for r in read_all(log, topic, 0, offsets[3])] == offsets[3:]

    def test_records_and_commits_survive_reopen(
        self, log: Log, topic: str, reopen: Callable[[Log], Log]
    ) -> None:
        log.ensure_topic(topic, 2, compacted=True)
        offsets = log.append(topic, [(1, b"k", b"v"), (1, b"gone", None)])
        log.append_and_commit(topic, [(0, b"j", b"w")], group="g", consumed={(topic, 1): 2})
        again = reopen(log)
        assert again.partitions(topic) == 2
        assert again.committed("g", topic, 1) == 2
        assert [(r.offset, r.key, r.value) for r in read_all(again, topic, 1)] == [
            (offsets[0], b"k", b"v"),
            (offsets[1], b"gone", None),
        ]
        more = again.append(topic, [(1, b"after", b"x")])
        assert more[0] > offsets[1]

    def test_a_tailing_reader_sees_every_record_once_in_order(self, log: Log, topic: str) -> None:
        log.ensure_topic(topic, 1, compacted=False)
        total = 200
        seen: list[bytes | None] = []

        def tail() -> None:
            offset, deadline = 0, time.monotonic() + 60
            while len(seen) < total and time.monotonic() < deadline:
                for record in log.read(topic, 0, offset, max_records=17, timeout_s=0.5):
                    seen.append(record.value)
                    offset = record.offset + 1

        reader = threading.Thread(target=tail)
        reader.start()
        for start in range(0, total, 20):
            log.append(topic, [(0, b"k", str(i).encode()) for i in range(start, start + 20)])
        reader.join(timeout=90)
        assert seen == [str(i).encode() for i in range(total)]
