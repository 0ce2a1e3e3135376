"""Where a view must have got to, read from the log (app/serve/data_plane.py)."""

from __future__ import annotations

import time
from pathlib import Path

from ragindex.app.serve.data_plane import TAIL_WINDOW, applied_target, open_log
from ragindex.log import KafkaLog
from ragindex.measure.servers import KafkaServer


def test_the_target_is_after_the_last_record_and_the_start_of_an_empty_partition(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    try:
        log.ensure_topic("chunks", 2, compacted=True)
        log.append("chunks", [(0, b"a", b"1"), (0, b"b", b"2")])
        assert applied_target(log, "chunks", 0) == 2
        assert applied_target(log, "chunks", 1) == 0
    finally:
        log.close()


def test_records_of_aborted_transactions_at_the_end_are_not_waited_for(
    kafka_server: KafkaServer,
) -> None:
    """Found on real pods: a generation stayed Verifying for 15 minutes. An ingest worker that
    timed out left an aborted transaction at the end of a chunks partition; the target was the
    start of the tail window, past the last committed record, which no view ever applies."""
    from confluent_kafka import Producer

    log = KafkaLog(kafka_server.bootstrap)
    try:
        log.ensure_topic("aborted-tail", 1, compacted=True)
        (last,) = log.append("aborted-tail", [(0, b"kept", b"1")])
        worker = Producer(
            {"bootstrap.servers": kafka_server.bootstrap, "transactional.id": "aborted-tail"}
        )
        worker.init_transactions(10)
        for _ in range(2):  # longer than the tail window, so the window must look further back
            worker.begin_transaction()
            for i in range(TAIL_WINDOW * 3):
                worker.produce("aborted-tail", key=f"lost{i}".encode(), value=b"x", partition=0)
            worker.flush(10)
            worker.abort_transaction(10)
        # The coordinator writes the abort markers after abort_transaction returns.
        deadline = time.monotonic() + 30
        while log.end_offset("aborted-tail", 0) < last + 6 * TAIL_WINDOW + 4:
            assert time.monotonic() < deadline, log.end_offset("aborted-tail", 0)
            time.sleep(0.2)
        assert applied_target(log, "aborted-tail", 0) == last + 1
        (after,) = log.append("aborted-tail", [(0, b"next", b"2")])
        assert applied_target(log, "aborted-tail", 0) == after + 1
    finally:
        log.close()
