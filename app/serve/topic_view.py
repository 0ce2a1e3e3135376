"""A replica's view of `chunks.<generation>`: opened once Ingest has created the topic, then
caught up from the log every REFRESH_S on the replica's worker thread (Shard<i>, Lexical).

Searches run on that same thread (FAISS and tantivy objects are not shared across threads), so
a backlog (a replica that restarted, a bulk load) is applied in slices of CATCH_UP_SLICE
records, one thread task each, and the searches that arrive meanwhile run between two slices
instead of behind the whole backlog. Until the view first reaches the end of the log it
refuses searches (`BackendUnavailable`: the Router tries another replica) rather than answer
from a partial index.

A view given a `view` name records its applied offsets, how stale it may be and (every
END_OFFSETS_EVERY_S) its partitions' end offsets into the replica's metrics after each slice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Generic, Protocol, TypeVar

from ragindex.app.serve.hops import Served, served
from ragindex.app.serve.threads import ReplicaThread, refresh_forever
from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.protocols import Log
from ragindex.telemetry import END_OFFSETS_EVERY_S, observe_view

log = logging.getLogger("ragindex.serve")

CATCH_UP_SLICE = 2000  # records applied per thread task: one FAISS add or tantivy commit's worth


class CatchesUp(Protocol):
    def catch_up(self, max_records: int | None = None) -> int: ...


V = TypeVar("V", bound=CatchesUp)
T = TypeVar("T")


class TopicView(Generic[V]):
    """The view `open_view` builds, or None until the topic exists (searches then get
    BackendUnavailable(`opening`)). It owns one worker thread (ReplicaThread) for the view;
    made inside the replica's event loop."""

    def __init__(
        self,
        thread_name: str,
        log: Log,
        topic: str,
        open_view: Callable[[], V],
        opening: str,
        caught_up: Callable[[V], object] = lambda view: None,
        *,
        view: str | None = None,
        offsets: Callable[[V], Mapping[int, int]] | None = None,
    ) -> None:
        """`view` and `offsets` (its applied offset per chunks partition): the metrics'
        `view` label and where its offsets are read; without them it records none."""
        self.thread = ReplicaThread(thread_name)
        self.current: V | None = None
        self.caught_up_once = False  # reached the end of the log at least once since opening
        self._log, self._topic, self._open_view, self._opening = log, topic, open_view, opening
        self._caught_up = caught_up  # after every catch-up, before any search sees it
        self._view, self._offsets = view, offsets
        self._ends_at = 0.0  # when the end offsets were last asked (monotonic)
        self._refresher = asyncio.get_running_loop().create_task(
            refresh_forever(self.thread, self._refresh, f"catch-up failed ({topic})")
        )

    def _refresh(self) -> bool:
        """One slice of catch-up; True while more is waiting (refresh again at once)."""
        if self.current is None:
            try:
                self._log.partitions(self._topic)
            except InvalidInput:
                return False  # Ingest has not created the topics yet
            self.current = self._open_view()
        started = time.time()
        try:
            applied = self.current.catch_up(CATCH_UP_SLICE)
        except BaseException:
            self._observe(self.current, None)  # it did not keep up: its staleness grows
            raise
        self._caught_up(self.current)
        if applied < CATCH_UP_SLICE:
            self.caught_up_once = True
        self._observe(self.current, started if applied < CATCH_UP_SLICE else None)
        return applied >= CATCH_UP_SLICE

    def _observe(self, current: V, current_at: float | None) -> None:
        """The view's offsets and staleness into the metrics (never failing the refresh)."""
        if self._view is None or self._offsets is None:
            return
        try:
            offsets = self._offsets(current)
            ends = None
            if time.monotonic() - self._ends_at >= END_OFFSETS_EVERY_S:
                ends = {p: self._log.end_offset(self._topic, p) for p in offsets}
                self._ends_at = time.monotonic()
            observe_view(self._view, offsets, current_at=current_at, ends=ends)
        except Exception as err:
            log.warning("could not record %s's metrics: %s", self._view, err)

    def get(self) -> V:
        if self.current is None:
            raise BackendUnavailable(self._opening)
        if not self.caught_up_once:
            raise BackendUnavailable(f"{self._opening}: catching up with the log")
        return self.current

    async def run(self, work: Callable[[V], T]) -> T:
        """`work` on the open view, on the replica's thread."""
        return await self.thread.run(lambda: work(self.get()))

    async def served(self, work: Callable[[V], T]) -> Served[T]:
        """`run`, with how long the work waited for the thread and how long it took."""
        return await served(self.thread.run, lambda: work(self.get()))

    def close(self, last: Callable[[V], object]) -> None:
        """Stop refreshing, run `last` on the open view (on its thread), stop the thread."""
        with contextlib.suppress(Exception):
            self._refresher.cancel()
            view = self.current
            if view is not None:
                self.thread.call(lambda: last(view))
            self.thread.close()
