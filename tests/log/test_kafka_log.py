"""The Kafka log against a real broker: the shared Log contract, plus zombie fencing and a
broker outage (what only Kafka can show)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from unittest import mock

import pytest
from pydantic import SecretStr

from ragindex.config import KafkaConnection
from ragindex.errors import BackendAccessDenied, BackendUnavailable
from ragindex.log import KafkaLog
from ragindex.measure.servers import KafkaServer
from ragindex.measure.servers.kafka import SASL_USERNAME
from ragindex.protocols import Log, WriterFenced
from ragindex.records import decode_document, docs_records
from ragindex.testing import LogContract, read_all
from ragindex.types import MAX_DOCUMENT_CHARS, Document

pytestmark = [pytest.mark.kafka]

# Small segments and an eager cleaner, so the compaction test sees Kafka's log cleaner work.
_FAST_COMPACTION = {
    "segment.ms": "200",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "3600000",
}


def _kafka_log(server: KafkaServer, timeout_s: float = 10.0) -> KafkaLog:
    return KafkaLog(server.bootstrap, timeout_s=timeout_s, topic_config=_FAST_COMPACTION)


class TestKafkaLogContract(LogContract):
    @pytest.fixture
    def log(self, kafka_server: KafkaServer) -> Iterator[Log]:
        log = _kafka_log(kafka_server)
        yield log
        log.close()

    @pytest.fixture
    def reopen(self, kafka_server: KafkaServer) -> Callable[[Log], Log]:
        def reopen(log: Log) -> Log:
            log.close()
            return _kafka_log(kafka_server)

        return reopen

    @pytest.fixture
    def failing_commit(self) -> Callable[[Log], AbstractContextManager[object]]:
        def failing(log: Log) -> AbstractContextManager[object]:
            # The records are produced inside the transaction; committing it fails as when the
            # coordinator is lost, so the transaction is aborted.
            from confluent_kafka import KafkaError, KafkaException

            error = KafkaException(KafkaError(KafkaError._TIMED_OUT, "injected"))
            return mock.patch.object(
                KafkaLog, "_commit_transaction", side_effect=error, autospec=True
            )

        return failing

    @pytest.fixture
    def force_compaction(self) -> Callable[[Log, str, int], None]:
        def compact(log: Log, topic: str, partition: int) -> None:
            # The active segment is never cleaned: roll it (segment.ms elapsed + one more
            # record), then wait, bounded, until the cleaner dropped the oldest record.
            time.sleep(0.5)
            log.append(topic, [(partition, b"roll", b"x")])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if read_all(log, topic, partition)[0].offset > 0:
                    return
                time.sleep(0.5)
                log.append(topic, [(partition, b"roll", b"x")])
            raise AssertionError("Kafka's log cleaner did not compact within 60 s")

        return compact


def test_a_restarted_worker_fences_its_zombie(kafka_server: KafkaServer) -> None:
    log = _kafka_log(kafka_server)
    log.ensure_topic("fence.in", 1, compacted=True)
    log.ensure_topic("fence.out", 1, compacted=True)
    zombie, successor = _kafka_log(kafka_server), _kafka_log(kafka_server)
    consumed = {("fence.in", 0): 1}
    zombie.append_and_commit("fence.out", [(0, b"a", b"1")], group="w", consumed=consumed)
    # Same group and input partition: the successor's init_transactions bumps the epoch.
    successor.append_and_commit("fence.out", [(0, b"b", b"2")], group="w", consumed=consumed)
    with pytest.raises(WriterFenced, match="newer writer"):
        zombie.append_and_commit(
            "fence.out", [(0, b"z", b"zombie")], group="w", consumed={("fence.in", 0): 9}
        )
    assert log.committed("w", "fence.in", 0) == 1
    assert [r.key for r in read_all(log, "fence.out", 0)] == [b"a", b"b"]
    for client in (log, zombie, successor):
        client.close()


def test_a_claim_fences_the_previous_writer_before_it_reads(kafka_server: KafkaServer) -> None:
    """A worker taking a partition over claims it first: the old owner's commit in flight
    fails, so nothing it does lands after the offset the new owner resumes from."""
    log = _kafka_log(kafka_server)
    log.ensure_topic("claim.in", 2, compacted=True)
    log.ensure_topic("claim.out", 1, compacted=True)
    old_owner, new_owner = _kafka_log(kafka_server), _kafka_log(kafka_server)
    old_owner.append_and_commit(
        "claim.out", [(0, b"a", b"1")], group="w", consumed={("claim.in", 0): 1}
    )
    assert new_owner.claim("w", "claim.in", 0) == 1
    with pytest.raises(WriterFenced, match="newer writer"):
        old_owner.append_and_commit(
            "claim.out", [(0, b"z", b"late")], group="w", consumed={("claim.in", 0): 2}
        )
    old_owner.append_and_commit(  # its other partition is still its own
        "claim.out", [(0, b"b", b"2")], group="w", consumed={("claim.in", 1): 1}
    )
    new_owner.append_and_commit(
        "claim.out", [(0, b"c", b"3")], group="w", consumed={("claim.in", 0): 2}
    )
    assert log.committed("w", "claim.in", 0) == 2
    assert [r.key for r in read_all(log, "claim.out", 0)] == [b"a", b"b", b"c"]
    for client in (log, old_owner, new_owner):
        client.close()


def test_a_commit_that_fails_after_landing_says_the_write_may_have_landed(
    kafka_server: KafkaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """commit_transaction can time out after the broker committed: the caller is told the
    outcome is unknown and a retry is safe, never that nothing is visible."""
    from confluent_kafka import KafkaError, KafkaException

    log = _kafka_log(kafka_server)
    log.ensure_topic("ambiguous", 1, compacted=False)
    make = log._producer

    class LandsThenTimesOut:
        def __init__(self, producer: object) -> None:
            self.producer = producer

        def __getattr__(self, name: str) -> object:
            return getattr(self.producer, name)

        def commit_transaction(self, *args: object) -> None:
            self.producer.commit_transaction(*args)  # type: ignore[attr-defined]
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "injected after the commit"))

    monkeypatch.setattr(log, "_producer", lambda txid: LandsThenTimesOut(make(txid)))
    with pytest.raises(BackendUnavailable, match="may have landed; writing it again is safe"):
        log.append("ambiguous", [(0, b"k", b"v")])
    monkeypatch.undo()
    assert [r.key for r in log.read("ambiguous", 0, 0, timeout_s=10)] == [b"k"]  # it landed
    log.close()


def test_a_stuck_admin_client_is_replaced_after_it_fails(
    kafka_server: KafkaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pod, one replica's AdminClient failed every metadata request ("Broker transport
    failure") for as long as the replica lived while its neighbours reached the broker, so its
    view never opened and a promotion waited on it forever. A failed admin call now replaces
    the client: the next call reaches the broker."""
    from confluent_kafka import KafkaError, KafkaException

    import ragindex.log.kafka_log as kafka_log

    class Stuck:
        def __init__(self, conf: dict[str, object]) -> None:
            pass

        def poll(self, timeout: float) -> int:
            return 0

        def list_topics(self, *args: object, **kwargs: object) -> None:
            error = KafkaError(KafkaError._TRANSPORT, "Broker transport failure (injected)")
            raise KafkaException(error)

    setup = _kafka_log(kafka_server)
    setup.ensure_topic("stuck-admin", 2, compacted=False)
    setup.close()
    with monkeypatch.context() as patch:
        patch.setattr(kafka_log, "AdminClient", Stuck)
        log = _kafka_log(kafka_server, timeout_s=2.0)
    try:
        with pytest.raises(BackendUnavailable, match="could not describe topic stuck-admin"):
            log.partitions("stuck-admin")
        assert log.partitions("stuck-admin") == 2
    finally:
        log.close()


def test_broker_down_is_unavailable_quickly_and_writes_resume(kafka_server: KafkaServer) -> None:
    log = _kafka_log(kafka_server, timeout_s=3.0)
    log.ensure_topic("outage", 1, compacted=False)
    log.append("outage", [(0, b"before", b"1")])
    log.append_and_commit("outage", [(0, b"work", b"1")], group="g", consumed={("outage", 0): 1})
    kafka_server.stop_broker()
    try:
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="Kafka"):
            log.append("outage", [(0, b"during", b"2")])
        with pytest.raises(BackendUnavailable, match="nothing of it is visible"):
            log.append_and_commit(
                "outage", [(0, b"half", b"2")], group="g", consumed={("outage", 0): 2}
            )
        assert time.monotonic() - started < 60  # bounded by the client timeouts
    finally:
        kafka_server.start_broker()
    deadline = time.monotonic() + 60
    while True:
        try:
            log.append("outage", [(0, b"after", b"3")])
            break
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    assert [r.key for r in read_all(log, "outage", 0)] == [b"before", b"work", b"after"]
    assert log.committed("g", "outage", 0) == 1  # the failed transaction committed nothing
    log.close()


def test_a_worker_transaction_fails_in_bound_and_resumes_after_the_broker_returns(
    kafka_server: KafkaServer,
) -> None:
    """The ingest worker's loop through an outage: its read-process-write transaction fails
    within a bound while the broker is down, and once it is back the same transactional id
    commits again promptly, `committed` answers, and nothing acknowledged is lost."""
    log = _kafka_log(kafka_server, timeout_s=3.0)
    log.ensure_topic("rpw.in", 1, compacted=False)
    log.ensure_topic("rpw.out", 1, compacted=False)
    log.append("rpw.in", [(0, b"d1", b"1"), (0, b"d2", b"2")])
    log.append_and_commit("rpw.out", [(0, b"c1", b"1")], group="w", consumed={("rpw.in", 0): 1})
    kafka_server.stop_broker()
    try:
        for _ in range(2):  # a worker retries; every try is bounded
            started = time.monotonic()
            with pytest.raises(BackendUnavailable, match="Kafka"):
                log.append_and_commit(
                    "rpw.out", [(0, b"lost", b"x")], group="w", consumed={("rpw.in", 0): 2}
                )
            assert time.monotonic() - started < 30
    finally:
        kafka_server.start_broker()
    deadline = time.monotonic() + 60
    while True:
        try:
            started = time.monotonic()
            log.append_and_commit(
                "rpw.out", [(0, b"c2", b"2")], group="w", consumed={("rpw.in", 0): 2}
            )
            break
        except BackendUnavailable:
            assert time.monotonic() - started < 30
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    started = time.monotonic()
    assert log.committed("w", "rpw.in", 0) == 2
    assert time.monotonic() - started < 10
    assert [r.key for r in read_all(log, "rpw.out", 0)] == [b"c1", b"c2"]
    log.close()


def test_an_open_transaction_is_invisible_to_readers(kafka_server: KafkaServer) -> None:
    """read_committed: end_offset is the last stable offset, and records of a transaction
    that is still open, then aborted, are never returned."""
    from confluent_kafka import Producer

    log = _kafka_log(kafka_server)
    log.ensure_topic("lso", 1, compacted=False)
    committed = log.append("lso", [(0, b"a", b"1")])
    stable_end = log.end_offset("lso", 0)
    other = Producer({"bootstrap.servers": kafka_server.bootstrap, "transactional.id": "lso"})
    other.init_transactions(10)
    other.begin_transaction()
    other.produce("lso", key=b"open", value=b"x", partition=0)
    other.flush(10)
    assert log.end_offset("lso", 0) == stable_end
    assert log.read("lso", 0, 0, timeout_s=0.5) == [read_all(log, "lso", 0)[0]]
    other.abort_transaction(10)
    later = log.append("lso", [(0, b"b", b"2")])
    assert [(r.offset, r.key) for r in read_all(log, "lso", 0)] == [
        (committed[0], b"a"),
        (later[0], b"b"),
    ]
    log.close()


def test_credentials_reach_a_scram_listener_and_wrong_ones_are_refused(
    kafka_server: KafkaServer,
) -> None:
    """The operator's external mode: SASL username and password from the connection."""
    secure = KafkaLog(
        kafka_server.sasl_bootstrap,
        connection=KafkaConnection(
            security_protocol="SASL_PLAINTEXT",
            username=SASL_USERNAME,
            password=SecretStr(kafka_server.sasl_password),
        ),
        timeout_s=5.0,
    )
    secure.ensure_topic("sasl.t", 1, compacted=True)
    offsets = secure.append("sasl.t", [(0, b"k", b"v")])
    assert [r.offset for r in read_all(secure, "sasl.t", 0)] == offsets
    secure.close()
    wrong = KafkaLog(
        kafka_server.sasl_bootstrap,
        connection=KafkaConnection(
            security_protocol="SASL_PLAINTEXT",
            username=SASL_USERNAME,
            password=SecretStr("not-the-password"),
        ),
        timeout_s=3.0,
    )
    with pytest.raises(BackendAccessDenied, match=r"(?i)authentication"):
        wrong.partitions("sasl.t")
    wrong.close()


def test_records_delivered_without_offsets_are_written_again_exactly_once(
    kafka_server: KafkaServer,
) -> None:
    """librdkafka sometimes reports a delivery without its offset: the transaction is aborted
    and written again (injected here at the commit of the first attempt), so `append` returns
    real offsets and readers see every record once."""
    from ragindex.log import kafka_calls

    log = _kafka_log(kafka_server)
    log.ensure_topic("unknown-offsets", 2, compacted=False)
    real_commit = KafkaLog._commit_transaction
    calls: list[int] = []

    def commit_once_unknown(self: KafkaLog, producer: object) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise kafka_calls.OffsetsUnknown(
                kafka_calls.KafkaError(kafka_calls.KafkaError._FAIL, "injected")
            )
        real_commit(self, producer)  # type: ignore[arg-type]

    records = [(p, f"k{n}".encode(), f"v{n}".encode()) for n in range(6) for p in (0, 1)]
    with mock.patch.object(KafkaLog, "_commit_transaction", commit_once_unknown):
        offsets = log.append("unknown-offsets", records)
    assert len(calls) == 2
    stored = {p: read_all(log, "unknown-offsets", p) for p in (0, 1)}
    for (p, key, value), offset in zip(records, offsets, strict=True):
        assert [(r.key, r.value) for r in stored[p] if r.offset == offset] == [(key, value)]
    assert sum(len(rs) for rs in stored.values()) == len(records)  # the aborted copy is unseen
    log.close()


def test_a_document_of_the_largest_size_the_api_takes_lands_in_kafka(
    kafka_server: KafkaServer,
) -> None:
    """Documents were stored as ASCII-escaped JSON (6 bytes per CJK character, 12 per emoji)
    and the producer refused records over 1 MB: the API accepted a 300 k-character Chinese
    text that Kafka then refused forever with a retryable 503."""
    before = KafkaLog(kafka_server.bootstrap, topic_config={"max.message.bytes": "1048588"})
    before.ensure_topic("large.old", 1, compacted=True)  # made with Kafka's default limit
    before.close()
    log = _kafka_log(kafka_server)
    largest = Document("books", "han", "", "漢" * MAX_DOCUMENT_CHARS)
    for topic in ("large.new", "large.old"):  # as the app creates `docs`, or finds it
        log.ensure_topic(topic, 1, compacted=True)
        (offset,) = log.append(topic, docs_records("t", [largest], 1))
        (record,) = log.read(topic, 0, offset, timeout_s=10)
        assert decode_document(record.value or b"") == largest
    log.close()
