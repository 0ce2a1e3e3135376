"""A replica's view of `chunks.<generation>`: opened once Ingest has created the topic, then
caught up from the log every REFRESH_S on the replica's worker thread (Shard<i>, Lexical)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from ragindex.app.serve.threads import ReplicaThread, refresh_forever
from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.protocols import Log


class CatchesUp(Protocol):
    def catch_up(self) -> object: ...


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
    ) -> None:
        self.thread = ReplicaThread(thread_name)
        self.current: V | None = None
        self._log, self._topic, self._open_view, self._opening = log, topic, open_view, opening
        self._refresher = asyncio.get_running_loop().create_task(
            refresh_forever(self.thread, self._refresh, f"catch-up failed ({topic})")
        )

    def _refresh(self) -> None:
        if self.current is None:
            try:
                self._log.partitions(self._topic)
            except InvalidInput:
                return  # Ingest has not created the topics yet
            self.current = self._open_view()
        self.current.catch_up()

    def get(self) -> V:
        if self.current is None:
            raise BackendUnavailable(self._opening)
        return self.current

    async def run(self, work: Callable[[V], T]) -> T:
        """`work` on the open view, on the replica's thread."""
        return await self.thread.run(lambda: work(self.get()))

    def close(self, last: Callable[[V], object]) -> None:
        """Stop refreshing, run `last` on the open view (on its thread), stop the thread."""
        with contextlib.suppress(Exception):
            self._refresher.cancel()
            view = self.current
            if view is not None:
                self.thread.call(lambda: last(view))
            self.thread.close()
