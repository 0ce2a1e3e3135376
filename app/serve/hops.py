"""What each hop of a cluster Router's query path costs: the round trip the Router waits, and
the replica's share of it.

A replica's query-path method answers `Served(value, queued_ms, service_ms)`: how long the
request waited there (for the replica's worker thread, or for its batch to start) and how long
the work took. The Router's clients call through `call_all`, which unwraps the values and
records, into the search's `HopLog` (a context variable one search sets, so a leg running on
another thread records into the same log), each hop's round trip and that share. The rest of a
round trip (`transport`: serialising, Ray's routing, both event loops, the OS scheduling the
processes) is the round trip less the replica's share.

A fan-out's answers are collected in the order sent, so a later call's round trip is when the
Router had it: at least the earlier ones'.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ragindex.app.serve import handle_failover

T = TypeVar("T")


@dataclass(frozen=True)
class Served(Generic[T]):
    """A replica's answer with its own share of the hop (milliseconds)."""

    value: T
    queued_ms: float
    service_ms: float


async def served(
    run: Callable[[Callable[[], T]], Awaitable[T]], work: Callable[[], T]
) -> Served[T]:
    """`work` through `run` (which hands it to the replica's worker thread), timed from now:
    queued until the thread starts it, service while it runs."""
    entered = time.perf_counter()
    started = ended = 0.0

    def timed() -> T:
        nonlocal started, ended
        started = time.perf_counter()
        try:
            return work()
        finally:
            ended = time.perf_counter()

    value = await run(timed)
    return Served(value, to_ms(started - entered), to_ms(ended - started))


class HopLog:
    """One search's hops: `<hop>.<part>` -> milliseconds, the parts `round_trip`, `queued`
    and `service`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the legs record from their own threads
        self.ms: dict[str, float] = {}

    def record(self, hop: str, round_trip_s: float, served_: Served[Any]) -> None:
        with self._lock:
            self.ms[f"{hop}.round_trip"] = to_ms(round_trip_s)
            self.ms[f"{hop}.queued"] = served_.queued_ms
            self.ms[f"{hop}.service"] = served_.service_ms


_current: ContextVar[HopLog | None] = ContextVar("ragindex_hops", default=None)


@contextmanager
def recording() -> Iterator[HopLog]:
    """A HopLog that the calls made inside (and in tasks started with a copy of this context)
    record into."""
    log = HopLog()
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)


def call_all(calls: Sequence[tuple[str, handle_failover.Send]]) -> list[Any]:
    """Each `(hop, send)`'s value, sent together and failed over as `handle_failover.call_all`;
    every answer is a `Served`, recorded under its hop when a search is recording."""
    answers = handle_failover.call_all_timed([send for _, send in calls])
    log = _current.get()
    if log is not None:
        for (hop, _), (answer, round_trip_s) in zip(calls, answers, strict=True):
            log.record(hop, round_trip_s, answer)
    return [answer.value for answer, _ in answers]


def call(hop: str, send: handle_failover.Send) -> Any:
    return call_all([(hop, send)])[0]


def to_ms(seconds: float) -> float:
    """Seconds as milliseconds, to the microsecond."""
    return round(seconds * 1000, 3)
