"""Kafka's `offsets.retention.minutes` against a real broker: the ingest groups commit offsets in
transactions and never join, so the broker expires them that long after the last commit; a
cluster that keeps them less than MIN_OFFSETS_RETENTION_MINUTES gets a clear warning when a
worker claims a partition (the next restart after an idle spell would re-read `docs`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from ragindex.log import KafkaLog
from ragindex.measure.servers.kafka import KafkaServer, start_kafka
from ragindex.topics import MIN_OFFSETS_RETENTION_MINUTES

pytestmark = [pytest.mark.kafka]


@pytest.fixture(scope="module")
def forgetful_kafka() -> Iterator[KafkaServer]:
    """A broker at a short offsets retention (an hour), as an external cluster may be set."""
    server = start_kafka(properties={"offsets.retention.minutes": "60"})
    try:
        yield server
    finally:
        server.stop()


def _claim(bootstrap: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    log = KafkaLog(bootstrap)
    try:
        log.ensure_topic("retention.docs", 1, compacted=True)
        with caplog.at_level(logging.WARNING, logger="ragindex.log"):
            caplog.clear()
            assert log.claim("ingest.g1", "retention.docs", 0) == 0
            log.claim("ingest.g1", "retention.docs", 0)  # checked once per log
        return [r.getMessage() for r in caplog.records if "offsets.retention" in r.getMessage()]
    finally:
        log.close()


def test_a_short_offsets_retention_is_warned_about_at_claim(
    forgetful_kafka: KafkaServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Broker at offsets.retention.minutes=60: claiming the ingest group's partition warns once,
    naming the setting, its value, the minimum and what it costs."""
    (warning,) = _claim(forgetful_kafka.bootstrap, caplog)
    assert "offsets.retention.minutes=60" in warning
    assert str(MIN_OFFSETS_RETENTION_MINUTES) in warning
    assert "re-read" in warning


def test_the_rendered_offsets_retention_passes_the_check(
    kafka_server: KafkaServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The harness's broker runs what the operator renders for a managed log: no warning."""
    assert _claim(kafka_server.bootstrap, caplog) == []
