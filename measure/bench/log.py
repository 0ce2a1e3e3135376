"""Append and read throughput of both logs: `python -m ragindex.measure.bench.log [--records N]`.

10 k records of 1.6 KB (about a chunk with its vector) to a 2-partition compacted topic, in
batches, then read one partition back. Kafka runs on a throwaway local broker.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from ragindex.log import FileLog, KafkaLog
from ragindex.measure.servers.kafka import running_kafka
from ragindex.protocols import Log


def measure(log: Log, records: int, batch: int, size: int) -> dict[str, float]:
    """Append `records` in batches, then read partition 0 back; one-time costs come first
    (on a fresh broker the first transaction creates Kafka's transaction-state topic)."""
    started = time.perf_counter()
    log.ensure_topic("bench.warmup", 1, compacted=True)
    log.append("bench.warmup", [(0, b"k", b"v")])
    warmup_s = time.perf_counter() - started
    topic = f"bench.{os.getpid()}.{time.monotonic_ns()}"
    log.ensure_topic(topic, 2, compacted=True)
    payload = os.urandom(size)
    started = time.perf_counter()
    for start in range(0, records, batch):
        log.append(topic, [(i % 2, f"k{i}".encode(), payload) for i in range(start, start + batch)])
    append_s = time.perf_counter() - started
    started, offset, read = time.perf_counter(), 0, 0
    while got := log.read(topic, 0, offset, max_records=1000):  # until caught up
        read += len(got)
        offset = got[-1].offset + 1
    return {
        "first_write_s": round(warmup_s, 3),
        "append_s": round(append_s, 3),
        "records_per_s": round(records / append_s),
        "read_partition_s": round(time.perf_counter() - started, 3),
        "read_records": read,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--size", type=int, default=1600)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        log = FileLog(Path(tmp))
        results["file"] = measure(log, args.records, args.batch, args.size)
        log.close()
    with running_kafka() as server:
        kafka = KafkaLog(server.bootstrap)
        results["kafka"] = measure(kafka, args.records, args.batch, args.size)
        kafka.close()
    print(json.dumps({"records": args.records, "batch": args.batch, **results}, indent=1))


if __name__ == "__main__":
    main()
