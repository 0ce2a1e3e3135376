"""The Kafka log: the `Log` on Apache Kafka (the cluster runtime), through confluent-kafka.

- Writes are Kafka transactions from an idempotent producer with `acks=all`: `append` commits
  its batch as one transaction (all or nothing for read_committed readers), and
  `append_and_commit` adds the group's consumed offsets to the same transaction
  (`send_offsets_to_transaction`), so a worker killed mid-batch neither loses nor duplicates.
- Fencing: the transactional id of `append_and_commit` is derived from the group and the
  consumed (topic, partition)s. A restarted worker for the same input partition calls
  `init_transactions` with that id, which bumps the producer epoch: the broker aborts the
  predecessor's open transaction and refuses its later writes (`WriterFenced`), so a zombie can
  never commit behind its successor's back.
- Every transactional call runs under a hard deadline of its own (`call_with_deadline`):
  librdkafka's `send_offsets_to_transaction` can block past its timeout when the group
  coordinator it cached went away, e.g. after a broker restart (librdkafka issues #5456 and
  #5511, open in 2.16). A call past its deadline fails the write as unavailable and its producer is
  abandoned, never touched again; the next write starts a fresh producer with the same
  transactional id, whose `init_transactions` fences the abandoned one and aborts what it
  left open.
- Reads use an assigned consumer per partition with `isolation.level=read_committed` and no
  auto-commit: aborted records and open transactions are never returned, `end_offset` is the
  last stable offset. Committed offsets live in Kafka's group offsets. A read knows it is at
  the end from the end offset the consumer's last fetch brought (every transaction ends in one
  commit marker, which is never delivered), not only from the partition-EOF event, which
  comes with the next, empty, fetch: the broker holds that one `fetch.wait.max.ms` (100 ms),
  and every view's catch-up and every ingest batch would wait that long.
- Topics are made and deleted through the AdminClient (`kafka_admin`, which also checks the
  brokers' `offsets.retention.minutes` at the first `claim`); compacted ones with
  `cleanup.policy=compact`, the others keep every record (`retention.ms=-1`) until `truncate`.
  A broker that does not answer within `timeout_s` gives `BackendUnavailable`, and a failed
  admin call replaces the AdminClient (a stuck one never recovered on its own).
- Records up to `MAX_RECORD_BYTES` (the API's limit on a document) are taken: the producer's
  `message.max.bytes` and every topic's `max.message.bytes` are `MAX_MESSAGE_BYTES` (raised on
  a topic made with less); one the broker still refuses is `TooLarge`, never retried.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from ragindex.config import KafkaConnection
from ragindex.errors import BackendAccessDenied, BackendUnavailable, InvalidInput, TooLarge
from ragindex.log.kafka_admin import (
    create_topic,
    delete_topic,
    offsets_retention_warning,
    partition_count,
    set_topic_config,
    topic_config,
)
from ragindex.log.kafka_calls import (
    FENCED_ERRORS,
    READER_GROUP,
    UNKNOWN_OFFSET_ATTEMPTS,
    CallStuck,
    CommitOutcomeUnknown,
    CommitStuck,
    OffsetsUnknown,
    call_with_deadline,
    error_of,
    transactional_id,
)
from ragindex.log.kafka_connection import AUTHENTICATION_ERRORS, TLS_ERRORS, client_config
from ragindex.log.kafka_reader import PartitionReader
from ragindex.log.validation import check_consumed, check_records, check_topic_name
from ragindex.protocols import WriterFenced
from ragindex.topics import MAX_MESSAGE_BYTES, MAX_RECORD_BYTES
from ragindex.types import LogRecord

log = logging.getLogger("ragindex.log")


class KafkaLog:
    """A `Log` on Kafka brokers (`bootstrap_servers`; TLS and SASL as `connection` says)."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        connection: KafkaConnection | None = None,
        timeout_s: float = 10.0,
        replication_factor: int = -1,
        topic_config: Mapping[str, str] | None = None,
        client_id: str = "ragindex",
    ) -> None:
        self.timeout_s = timeout_s
        self._last_error: KafkaError | None = None
        self.replication_factor = replication_factor
        self.topic_config = dict(topic_config or {})
        timeout_ms = int(timeout_s * 1000)
        # What every client of this log starts from (secrets included: never log it).
        self._common = client_config(
            bootstrap_servers,
            connection,
            {
                "client.id": client_id,
                "socket.timeout.ms": timeout_ms,
                "log_level": 0,  # connection failures surface as errors, not stderr noise
                "error_cb": self._remember_error,
            },
        )
        self._admin = AdminClient(dict(self._common))
        self._mutex = threading.Lock()  # guards the client maps, held only briefly
        # One transaction at a time per transactional id (its producer); writes of different
        # ids (a worker's input partitions) run side by side.
        self._writing: dict[str, threading.Lock] = {}
        self._producers: dict[str, Producer] = {}
        self._readers: dict[tuple[str, int], PartitionReader] = {}
        self._groups: dict[str, Consumer] = {}
        self._partition_counts: dict[str, int] = {}
        self._append_id = f"ragindex.append.{uuid.uuid4().hex}"
        self._retention_checked = False
        reader = {"group.id": READER_GROUP, "enable.auto.commit": False}
        self._offsets = Consumer({**self._common, **reader, "isolation.level": "read_committed"})

    # -- clients ------------------------------------------------------------------------------

    def _remember_error(self, error: KafkaError) -> None:
        """Client-level errors (e.g. failed SASL authentication) arrive here, not as the
        exception of the call that then times out: keep the last one for the message."""
        self._last_error = error

    def _unavailable(self, what: str, e: BaseException) -> BackendUnavailable:
        """The error for a failed call: BackendAccessDenied when the brokers refused the login
        (retrying cannot help), naming the settings to check on a login or TLS failure."""
        self._admin.poll(0)  # serve the admin client's queued error callbacks
        reported, hint, kind = self._last_error, "", BackendUnavailable
        if reported is not None and reported.code() in AUTHENTICATION_ERRORS:
            kind = BackendAccessDenied
            hint = f"; check {KafkaConnection.ENV_PREFIX}USERNAME and PASSWORD[_FILE]"
        elif reported is not None and reported.code() in TLS_ERRORS:
            hint = f"; is the brokers' CA the one in {KafkaConnection.env_name('ca_file')}?"
        cause = f" (the client reported: {reported.str()}{hint})" if reported is not None else ""
        return kind(
            f"Kafka ({self._common['bootstrap.servers']}) could not {what} "
            f"within {self.timeout_s:.0f}s: {e}{cause}"
        )

    def _admin_unavailable(self, what: str, e: BaseException) -> BackendUnavailable:
        """`_unavailable` for a failed AdminClient call, which also replaces the client: one
        was seen failing every metadata request ("Broker transport failure") for as long as
        its replica lived, while the other clients in its pod reached the same broker; a new
        client connects anew, so the next call can succeed."""
        unavailable = self._unavailable(what, e)
        self._admin = AdminClient(dict(self._common))
        return unavailable

    def _producer(self, transactional_id: str) -> Producer:
        producer = self._producers.get(transactional_id)
        if producer is not None:
            return producer
        producer = Producer(
            {
                **self._common,
                "transactional.id": transactional_id,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.max.bytes": MAX_MESSAGE_BYTES,
                "message.timeout.ms": int(self.timeout_s * 1000),
                # A writer that dies mid-transaction holds back readers (the LSO) until the
                # broker aborts it: keep that short, above the delivery timeout it must exceed.
                "transaction.timeout.ms": int(self.timeout_s * 1000) + 5000,
            }
        )
        try:
            call_with_deadline(producer.init_transactions, self.timeout_s)
        except KafkaException as e:
            raise self._unavailable("start a transactional producer", e) from e
        self._producers[transactional_id] = producer
        return producer

    def _group(self, group: str) -> Consumer:
        with self._mutex:
            return self._group_locked(group)

    def _group_locked(self, group: str) -> Consumer:
        consumer = self._groups.get(group)
        if consumer is None:
            consumer = Consumer({**self._common, "group.id": group, "enable.auto.commit": False})
            self._groups[group] = consumer
        return consumer

    def _reader(self, topic: str, partition: int) -> PartitionReader:
        with self._mutex:
            return self._reader_locked(topic, partition)

    def _reader_locked(self, topic: str, partition: int) -> PartitionReader:
        reader = self._readers.get((topic, partition))
        if reader is None:
            consumer = Consumer(
                {
                    **self._common,
                    "group.id": READER_GROUP,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "error",
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 100,
                }
            )
            reader = PartitionReader(consumer, threading.Lock())
            self._readers[(topic, partition)] = reader
        return reader

    # -- topics -------------------------------------------------------------------------------

    def _describe(self, topic: str) -> int | None:
        """The partition count of `topic`, or None if it does not exist."""
        check_topic_name(topic)
        try:
            count = partition_count(self._admin, topic, self.timeout_s)
        except KafkaException as e:
            raise self._admin_unavailable(f"describe topic {topic}", e) from e
        if count is not None:
            self._partition_counts[topic] = count
        return count

    def ensure_topic(self, topic: str, partitions: int, *, compacted: bool) -> None:
        if not isinstance(partitions, int) or partitions < 1:
            raise InvalidInput(f"topic {topic}: partitions must be an int >= 1, got {partitions!r}")
        existing = self._describe(topic)
        if existing is None:
            config = {"cleanup.policy": "compact"} if compacted else {"retention.ms": "-1"}
            config["max.message.bytes"] = str(MAX_MESSAGE_BYTES)
            new = NewTopic(
                topic, partitions, self.replication_factor, config={**config, **self.topic_config}
            )
            try:
                create_topic(self._admin, new, self.timeout_s)
            except KafkaException as e:
                raise self._admin_unavailable(f"create topic {topic}", e) from e
            except TimeoutError as e:
                raise self._admin_unavailable(f"see leaders for the new topic {topic}", e) from e
            existing = self._describe(topic)
        try:
            config = topic_config(self._admin, topic, self.timeout_s)
        except KafkaException as e:
            raise self._admin_unavailable(f"read the config of topic {topic}", e) from e
        compacted_now = "compact" in str(config["cleanup.policy"])
        if existing != partitions or compacted_now != compacted:
            raise InvalidInput(
                f"topic {topic} exists with {existing} partitions (compacted={compacted_now}), "
                f"not {partitions} (compacted={compacted})"
            )
        if int(config["max.message.bytes"]) < MAX_MESSAGE_BYTES:  # made before ragindex set it
            try:
                set_topic_config(
                    self._admin, topic, "max.message.bytes", str(MAX_MESSAGE_BYTES), self.timeout_s
                )
            except KafkaException as e:
                raise self._admin_unavailable(f"raise max.message.bytes of topic {topic}", e) from e

    def delete_topic(self, topic: str) -> None:
        if self._describe(topic) is None:
            return
        with self._mutex:
            for key in [k for k in self._readers if k[0] == topic]:
                self._readers.pop(key).consumer.close()
        try:
            delete_topic(self._admin, topic, self.timeout_s)
        except KafkaException as e:
            raise self._admin_unavailable(f"delete topic {topic}", e) from e
        except TimeoutError as e:
            raise self._admin_unavailable(f"see topic {topic} deleted", e) from e
        self._partition_counts.pop(topic, None)

    def partitions(self, topic: str) -> int:
        count = self._describe(topic)
        if count is None:
            raise InvalidInput(f"no topic {topic!r} in Kafka")
        return count

    def _check_partition(self, topic: str, partition: int) -> None:
        count = self._partition_counts.get(topic) or self.partitions(topic)
        if not isinstance(partition, int) or not 0 <= partition < count:
            raise InvalidInput(f"partition {partition!r} out of range for {topic} ({count})")

    # -- writes -------------------------------------------------------------------------------

    def _writing_lock(self, transactional_id: str) -> threading.Lock:
        with self._mutex:
            return self._writing.setdefault(transactional_id, threading.Lock())

    def append(self, topic: str, records: Sequence[tuple[int, bytes, bytes | None]]) -> list[int]:
        with self._writing_lock(self._append_id):
            return self._transact(self._append_id, topic, records, None, {})

    def append_and_commit(
        self,
        topic: str,
        records: Sequence[tuple[int, bytes, bytes | None]],
        *,
        group: str,
        consumed: Mapping[tuple[str, int], int],
    ) -> list[int]:
        check_consumed(group, consumed)
        txid = transactional_id(group, consumed)
        with self._writing_lock(txid):
            return self._transact(txid, topic, records, group, consumed)

    def claim(self, group: str, topic: str, partition: int) -> int:
        self._check_partition(topic, partition)
        self._check_offsets_retention()
        txid = transactional_id(group, {(topic, partition): 0})
        with self._writing_lock(txid):
            self._producers.pop(txid, None)  # this client's own, if it wrote before: replaced
            self._producer(txid)  # init_transactions: the broker fences every earlier writer
        return self.committed(group, topic, partition)

    def _check_offsets_retention(self) -> None:
        """Warn, once per log, when the brokers keep committed offsets too short a time."""
        if self._retention_checked:
            return
        try:
            warning = offsets_retention_warning(self._admin, self.timeout_s)
        except (KafkaException, ValueError) as e:
            log.warning("could not read the brokers' offsets.retention.minutes: %s", e)
            return
        self._retention_checked = True
        if warning is not None:
            log.warning("Kafka (%s) %s", self._common["bootstrap.servers"], warning)

    def _transact(
        self,
        transactional_id: str,
        topic: str,
        records: Sequence[tuple[int, bytes, bytes | None]],
        group: str | None,
        consumed: Mapping[tuple[str, int], int],
    ) -> list[int]:
        count = self._partition_counts.get(topic) or self.partitions(topic)
        check_records(topic, records, count)
        if not records and group is None:
            return []
        for attempt in range(UNKNOWN_OFFSET_ATTEMPTS):
            producer = self._producer(transactional_id)
            try:
                offsets = self._transact_once(producer, topic, records, group, consumed)
                break
            except KafkaException as e:
                self._abort(transactional_id, producer, e)
                if isinstance(e, OffsetsUnknown) and attempt + 1 < UNKNOWN_OFFSET_ATTEMPTS:
                    log.warning("%s; writing the transaction again", e)
                    continue
                error = error_of(e)
                if error is not None and error.code() in FENCED_ERRORS:
                    raise WriterFenced(
                        f"transactional id {transactional_id} was taken over by a newer writer: {e}"
                    ) from e
                if error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                    raise TooLarge(
                        f"Kafka refused a record of {topic} as too large ({e}); ragindex writes"
                        f" records up to {MAX_RECORD_BYTES} bytes, so the topic's"
                        f" max.message.bytes must be at least {MAX_MESSAGE_BYTES}; nothing of"
                        " the write is visible"
                    ) from e
                if isinstance(e, CommitOutcomeUnknown):
                    raise self._unavailable(
                        "confirm the commit (the write may have landed; writing it again is safe)",
                        e,
                    ) from e
                raise self._unavailable("commit the write (nothing of it is visible)", e) from e
        self._await_stable(topic, records, offsets)
        return offsets

    def _transact_once(
        self,
        producer: Producer,
        topic: str,
        records: Sequence[tuple[int, bytes, bytes | None]],
        group: str | None,
        consumed: Mapping[tuple[str, int], int],
    ) -> list[int]:
        """One transaction of `records` (and the group's offsets); raises KafkaException with
        the transaction left open for the caller to abort."""
        offsets: list[int] = [-1] * len(records)
        failures: list[KafkaError] = []

        def delivered(index: int) -> Any:
            def report(err: KafkaError | None, msg: Any) -> None:
                if err is not None:
                    failures.append(err)
                else:
                    offset = msg.offset()
                    offsets[index] = -1 if offset is None else offset

            return report

        producer.begin_transaction()
        for i, (partition, key, value) in enumerate(records):
            while True:
                try:
                    producer.produce(
                        topic, value=value, key=key, partition=partition, on_delivery=delivered(i)
                    )
                    break
                except BufferError:  # local queue full: let deliveries drain
                    producer.poll(0.05)
        if group is not None:
            positions = [TopicPartition(t, p, o) for (t, p), o in consumed.items()]
            metadata = self._group(group).consumer_group_metadata()
            call_with_deadline(
                lambda timeout: producer.send_offsets_to_transaction(positions, metadata, timeout),
                self.timeout_s,
            )
        if producer.flush(self.timeout_s) or failures:
            raise KafkaException(failures[0] if failures else KafkaError(KafkaError._TIMED_OUT))
        unknown = sum(1 for o in offsets if o < 0)
        if unknown:
            raise OffsetsUnknown(
                KafkaError(
                    KafkaError._FAIL,
                    f"{unknown} of {len(records)} records were delivered without their offsets",
                )
            )
        self._commit_transaction(producer)
        return offsets

    def _commit_transaction(self, producer: Producer) -> None:
        try:
            call_with_deadline(producer.commit_transaction, self.timeout_s)
        except CallStuck as e:
            raise CommitStuck(*e.args) from e
        except KafkaException as e:
            error = error_of(e)
            if error is not None and error.code() in FENCED_ERRORS:
                raise  # a fenced producer's transaction is never committed
            raise CommitOutcomeUnknown(error or KafkaError(KafkaError._FAIL, str(e))) from e

    def _abort(self, transactional_id: str, producer: Producer, cause: KafkaException) -> None:
        """Abort the open transaction; a producer that cannot (broker gone, fenced, a fatal
        error, a call stuck in it) is dropped, and the next one's init_transactions fences it
        and aborts what it left open."""
        if isinstance(cause, CallStuck):  # the stuck call still owns the producer: leave it be
            log.warning("abandoning the producer of %s: %s", transactional_id, cause)
        else:
            try:
                call_with_deadline(producer.abort_transaction, self.timeout_s)
                return
            except KafkaException:
                pass
        self._producers.pop(transactional_id, None)

    def writer_problem(self) -> str | None:
        return None  # a failed write's producer is replaced by the next write's

    def truncate(self, topic: str, partition: int, before_offset: int) -> None:
        end = self.end_offset(topic, partition)
        if not isinstance(before_offset, int) or not 0 <= before_offset <= end:
            raise InvalidInput(
                f"cannot truncate {topic}/{partition} before {before_offset!r}: it ends at {end}"
            )
        if before_offset <= self.begin_offset(topic, partition):
            return
        tp = TopicPartition(topic, partition, before_offset)
        try:
            self._admin.delete_records([tp], request_timeout=self.timeout_s)[tp].result()
        except KafkaException as e:
            raise self._admin_unavailable(f"truncate {topic}/{partition}", e) from e

    # -- reads --------------------------------------------------------------------------------

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        self._check_partition(topic, partition)
        deadline = time.monotonic() + self.timeout_s
        while True:  # the client is thread-safe; under read_committed `high` is the LSO
            try:
                low, high = self._offsets.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=self.timeout_s, cached=False
                )
                return int(low), int(high)
            except KafkaException as e:  # e.g. no leader yet for a new topic: retry, bounded
                if time.monotonic() > deadline:
                    raise self._unavailable(f"read the offsets of {topic}/{partition}", e) from e
                time.sleep(0.1)

    def _await_stable(
        self, topic: str, records: Sequence[tuple[int, Any, Any]], offsets: list[int]
    ) -> None:
        """Return once readers can see the committed records: the commit markers are written
        to the partitions just after `commit_transaction`, and the LSO moves past them."""
        last: dict[int, int] = {}
        for (partition, _, _), offset in zip(records, offsets, strict=True):
            last[partition] = max(last.get(partition, -1), offset)
        deadline = time.monotonic() + self.timeout_s
        for partition, offset in last.items():  # committed already: never fail the write here
            with contextlib.suppress(BackendUnavailable):
                while self._watermarks(topic, partition)[1] <= offset:
                    if time.monotonic() > deadline:
                        return
                    time.sleep(0.002)

    def end_offset(self, topic: str, partition: int) -> int:
        return self._watermarks(topic, partition)[1]

    def begin_offset(self, topic: str, partition: int) -> int:
        return self._watermarks(topic, partition)[0]

    def committed(self, group: str, topic: str, partition: int) -> int:
        self._check_partition(topic, partition)
        consumer = self._group(group)  # never behind a write: the commit is atomic
        try:
            (tp,) = consumer.committed([TopicPartition(topic, partition)], timeout=self.timeout_s)
        except KafkaException as e:
            raise self._unavailable(f"read group {group}'s offsets", e) from e
        return 0 if tp.offset == OFFSET_INVALID or tp.offset < 0 else int(tp.offset)

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
        self._check_partition(topic, partition)
        reader = self._reader(topic, partition)
        with reader.lock:
            if reader.next_offset != from_offset:
                reader.consumer.assign([TopicPartition(topic, partition, from_offset)])
                reader.next_offset, reader.at_end, reader.answered = from_offset, False, False
            try:
                return reader.fetch(topic, partition, max_records, timeout_s, self.timeout_s)
            except (TimeoutError, KafkaException) as e:
                raise self._unavailable(f"read {topic}/{partition}", e) from e

    def close(self) -> None:
        with self._mutex:
            writes = list(self._writing.values())
        with contextlib.ExitStack() as held:  # after the transactions in flight
            for lock in writes:
                held.enter_context(lock)
            self._close_clients()

    def _close_clients(self) -> None:
        with self._mutex:
            for producer in list(self._producers.values()):
                producer.flush(0)
            for reader in self._readers.values():
                reader.consumer.close()
            for consumer in self._groups.values():
                consumer.close()
            self._offsets.close()
            self._producers.clear()
            self._readers.clear()
            self._groups.clear()
