"""A replica's view of its topic (app/serve/topic_view.py): a backlog is applied in slices that
searches run between, and a view that never reached the end of the log refuses searches
(#29 item 2)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ragindex.app.serve.topic_view import CATCH_UP_SLICE, TopicView
from ragindex.errors import BackendUnavailable
from ragindex.log import FileLog
from ragindex.protocols import Log

TOPIC = "chunks"


class SlowCountingView:
    """Applies the topic's records by counting them, SLICE_S per slice (fault injection: an
    index slow to apply), reading the real log."""

    SLICE_S = 0.05

    def __init__(self, log: Log) -> None:
        self.log = log
        self.offset = 0
        self.slices = 0

    def catch_up(self, max_records: int | None = None) -> int:
        records = self.log.read(TOPIC, 0, self.offset, max_records=max_records or 1_000_000)
        if records:
            time.sleep(self.SLICE_S)
            self.offset = records[-1].offset + 1
            self.slices += 1
        return len(records)


def fill(log: Log, records: int) -> None:
    log.append(TOPIC, [(0, f"k{i}".encode(), b"v") for i in range(records)])


async def eventually(check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


@pytest.mark.anyio
async def test_searches_run_between_the_slices_of_a_backlog(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    log.ensure_topic(TOPIC, 1, compacted=False)
    fill(log, 10)
    made: list[SlowCountingView] = []
    view = TopicView(
        "t", log, TOPIC, lambda: made.append(SlowCountingView(log)) or made[-1], "opening"
    )
    try:
        await eventually(lambda: view.caught_up_once)
        backlog = 8 * CATCH_UP_SLICE
        fill(log, backlog)
        (counting,) = made
        await eventually(lambda: counting.offset > 10)  # the backlog is being applied
        seen = await view.run(lambda v: v.offset)  # a search, on the view's thread
        assert 10 < seen < 10 + backlog  # answered mid-backlog, not behind all of it
        await eventually(lambda: counting.offset == 10 + backlog)
        assert counting.slices >= 1 + 8  # one slice per task, each at most CATCH_UP_SLICE
    finally:
        view.close(lambda v: None)
        log.close()


@pytest.mark.anyio
async def test_a_view_that_never_reached_the_end_refuses_searches(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    log.ensure_topic(TOPIC, 1, compacted=False)
    fill(log, 6 * CATCH_UP_SLICE)
    view = TopicView("t", log, TOPIC, lambda: SlowCountingView(log), "shard 0 is opening")
    try:
        with pytest.raises(BackendUnavailable, match="shard 0 is opening"):
            await view.run(lambda v: v.offset)  # not open yet, or open and catching up
        await eventually(lambda: view.current is not None and view.current.offset > 0)
        # Queued behind at most the slice being applied: two of six, never the end.
        with pytest.raises(BackendUnavailable, match="catching up with the log"):
            await view.run(lambda v: v.offset)
        await eventually(lambda: view.caught_up_once)
        assert await view.run(lambda v: v.offset) == 6 * CATCH_UP_SLICE
    finally:
        view.close(lambda v: None)
        log.close()


class FailingView(SlowCountingView):
    """Fault injection: the log read fails while `failing` is set."""

    failing = False

    def catch_up(self, max_records: int | None = None) -> int:
        if self.failing:
            raise OSError("the log is unreachable")
        return super().catch_up(max_records)


def view_gauge(name: str, view: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    from ragindex.telemetry.metrics import exposition

    for family in text_string_to_metric_families(exposition().decode()):
        for s in family.samples:
            if s.name == name and s.labels == {"view": view, "partition": "0"}:
                return s.value
    return None


@pytest.mark.anyio
async def test_a_named_view_records_its_offsets_and_a_growing_staleness_when_it_fails(
    tmp_path: Path,
) -> None:
    log = FileLog(tmp_path)
    log.ensure_topic(TOPIC, 1, compacted=False)
    fill(log, 10)
    made: list[FailingView] = []
    view = TopicView(
        "t",
        log,
        TOPIC,
        lambda: made.append(FailingView(log)) or made[-1],
        "opening",
        view="metrics-test",
        offsets=lambda v: {0: v.offset},
    )
    try:
        await eventually(lambda: view_gauge("ragindex_view_applied_offset", "metrics-test") == 10)
        assert view_gauge("ragindex_view_end_offset", "metrics-test") == 10
        made[0].failing = True
        fill(log, 5)
        first = view_gauge("ragindex_view_freshness_seconds", "metrics-test")
        await eventually(
            lambda: (
                (view_gauge("ragindex_view_freshness_seconds", "metrics-test") or 0) > (first or 0)
            )
        )
        assert view_gauge("ragindex_view_applied_offset", "metrics-test") == 10
        made[0].failing = False  # the log is back: current again, staleness back down
        await eventually(lambda: view_gauge("ragindex_view_applied_offset", "metrics-test") == 15)
    finally:
        view.close(lambda v: None)
