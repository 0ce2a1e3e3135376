"""The Kafka log's client plumbing: transactional ids, the errors a
client call ends in, and the hard deadline every transactional call runs under."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

READER_GROUP = "ragindex.readers"  # never commits: readers keep their own offsets
FENCED_ERRORS = {KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FENCED}
OUT_OF_RANGE_ERRORS = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}
CALL_GRACE_S = 1.0  # beyond the client's own timeout, before a call counts as stuck
UNKNOWN_OFFSET_ATTEMPTS = 3  # transactions written before unknown offsets fail the write
_T = TypeVar("_T")


def transactional_id(group: str, consumed: Mapping[tuple[str, int], int]) -> str:
    """The transactional id of `group`'s writes consuming these input partitions: a successor
    on the same inputs shares it, and fences its predecessor by initialising it."""
    return f"ragindex.{group}." + ",".join(f"{t}:{p}" for t, p in sorted(consumed))


class CallStuck(KafkaException):
    """A client call did not return by its deadline; its producer must not be used again."""


class CommitOutcomeUnknown(KafkaException):
    """commit_transaction failed (a timeout, the coordinator gone): the broker may have
    committed the transaction all the same. The next init_transactions of its transactional
    id settles it one way or the other."""


class CommitStuck(CallStuck, CommitOutcomeUnknown):
    """commit_transaction did not return by its deadline: both of the above."""


class OffsetsUnknown(KafkaException):
    """Every record was delivered, but not every delivery report carried its offset (librdkafka
    sometimes reports none: seen in 2 of ~30 runs of the snapshot tests, on records of ~1 MB).
    `append` must say where each record landed, so the transaction is aborted (nothing of it
    becomes visible) and written again."""


def error_of(e: BaseException) -> KafkaError | None:
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return e.args[0]
    return None


def call_with_deadline(call: Callable[[float], _T], timeout_s: float) -> _T:
    """`call(timeout_s)` in a thread of its own, returning or raising what it did, or
    `CallStuck` once it runs past the timeout (plus grace): the caller stops waiting, and the
    thread ends whenever the client returns (confluent-kafka releases the GIL while it
    blocks, so the waiting thread is free)."""
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call(timeout_s)))
        except BaseException as e:  # handed to the waiting thread as is
            outcome.append((False, e))

    thread = threading.Thread(target=run, name="ragindex-kafka-call", daemon=True)
    thread.start()
    thread.join(timeout_s + CALL_GRACE_S)
    if not outcome:
        raise CallStuck(
            KafkaError(
                KafkaError._TIMED_OUT,
                f"the Kafka client did not return within {timeout_s + CALL_GRACE_S:.0f}s",
            )
        )
    returned, value = outcome[0]
    if not returned:
        raise value
    return value
