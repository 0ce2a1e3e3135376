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
