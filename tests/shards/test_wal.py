"""The write-ahead log: round trip, torn tails, truncation, one writer."""

from __future__ import annotations

import numpy as np
import pytest

from ragindex.errors import InvalidInput
from ragindex.shards.wal import (
    DeleteRecord,
    UpsertRecord,
    WalLocked,
    WalTruncated,
    WriteAheadLog,
    read_from,
)


def upsert(tenant: str, n: int, seed: int = 0) -> UpsertRecord:
    x = np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)
    return UpsertRecord(tenant, tuple(f"{tenant}:{seed}:{i}" for i in range(n)), x)


def same(a, b) -> bool:
    if type(a) is not type(b) or a.tenant_id != b.tenant_id or a.chunk_ids != b.chunk_ids:
        return False
    return not isinstance(a, UpsertRecord) or np.array_equal(a.vectors, b.vectors)


def test_records_round_trip_with_offsets(tmp_path):
    wal = WriteAheadLog(tmp_path)
    records = [upsert("acme", 3), DeleteRecord("acme", ("acme:0:1",)), upsert("globex", 2, seed=1)]
    first = wal.append(records[:1])
    end = wal.append(records[1:])
    read = list(read_from(tmp_path, 0))
    assert all(same(a, b) for (a, _), b in zip(read, records, strict=True))
    assert read[0][1] == first and read[-1][1] == end == wal.end_offset
    assert next(r for r, _ in read_from(tmp_path, first)) == records[1]
    assert list(read_from(tmp_path, end)) == []
    assert wal.append([]) == end
    wal.close()


def test_a_torn_tail_stops_reading_and_the_next_writer_cuts_it(tmp_path):
    wal = WriteAheadLog(tmp_path)
    good = wal.append([upsert("acme", 2)])
    wal.close()
    segment = next(tmp_path.glob("*.wal"))
    whole = segment.read_bytes()
    wal = WriteAheadLog(tmp_path)
    wal.append([upsert("acme", 5, seed=2)])
    wal.close()
    full = segment.read_bytes()
    for cut in (len(whole) + 3, len(whole) + 20, len(full) - 1):  # crash mid-write
        segment.write_bytes(full[:cut])
        assert [end for _, end in read_from(tmp_path, 0)] == [good]
    flipped = bytearray(full)
    flipped[-5] ^= 0xFF  # a corrupt payload fails its checksum
    segment.write_bytes(bytes(flipped))
    assert [end for _, end in read_from(tmp_path, 0)] == [good]
    wal = WriteAheadLog(tmp_path)  # recovery cuts the torn record off...
    assert wal.end_offset == good and segment.stat().st_size == good
    after = wal.append([DeleteRecord("acme", ("x",))])  # ...so later records are readable
    assert [end for _, end in read_from(tmp_path, 0)] == [good, after]
    wal.close()


def test_truncation_keeps_offsets_and_refuses_dropped_ones(tmp_path):
    wal = WriteAheadLog(tmp_path)
    a = wal.append([upsert("acme", 2)])
    b = wal.append([upsert("acme", 2, seed=1)])
    wal.truncate(a)  # a snapshot covers the first record only
    assert [end for _, end in read_from(tmp_path, a)] == [b]
    c = wal.append([DeleteRecord("acme", ("acme:0:0",))])
    assert [end for _, end in read_from(tmp_path, a)] == [b, c]
    wal.truncate(c)
    assert len(list(tmp_path.glob("*.wal"))) == 1
    with pytest.raises(WalTruncated):
        list(read_from(tmp_path, a))
    assert list(read_from(tmp_path, c)) == []
    d = wal.append([upsert("acme", 1, seed=3)])
    wal.close()
    reopened = WriteAheadLog(tmp_path)
    assert reopened.end_offset == d
    assert [end for _, end in reopened.read_from(c)] == [d]
    with pytest.raises(InvalidInput, match="cannot truncate"):
        reopened.truncate(d + 1)
    reopened.close()


def test_a_second_writer_is_refused(tmp_path):
    wal = WriteAheadLog(tmp_path)
    with pytest.raises(WalLocked, match="another process"):
        WriteAheadLog(tmp_path)
    wal.close()
    WriteAheadLog(tmp_path).close()


def test_an_empty_or_missing_log_reads_as_empty(tmp_path):
    assert list(read_from(tmp_path / "nothing", 0)) == []
    with pytest.raises(WalTruncated):
        list(read_from(tmp_path / "nothing", 10))


def test_a_failed_append_never_hides_later_acknowledged_records(tmp_path):
    """#14: a write that fails midway (disk full) is cut back, so what is acknowledged after
    it is readable and survives a reopen (before the fix the torn bytes hid it)."""
    import errno
    import os
    from unittest import mock

    from ragindex.shards import wal as wal_module

    def short_write_then_enospc(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    log = WriteAheadLog(tmp_path)
    first = log.append([upsert("acme", 2)])
    with (
        mock.patch.object(wal_module, "write_all", short_write_then_enospc),
        pytest.raises(OSError, match="No space"),
    ):
        log.append([upsert("acme", 50, seed=1)])
    later = log.append([DeleteRecord("acme", ("acme:0:0",))])  # acknowledged after the failure
    log.close()
    read = list(read_from(tmp_path, 0))
    assert [offset for _record, offset in read] == [first, later]
    assert isinstance(read[1][0], DeleteRecord)
    WriteAheadLog(tmp_path).close()  # reopening keeps both
    assert [offset for _record, offset in read_from(tmp_path, 0)] == [first, later]
