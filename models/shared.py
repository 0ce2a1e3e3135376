"""One embedder shared by the threads of a replica: its searches, answers and views.

A fast tokenizer refuses concurrent use ("Already borrowed"), so the model runs one call at a
time. Single queries that arrive while a call runs are embedded together by the next call
(group commit): under load one call reads the model's weights once for several queries
(fp32 MiniLM on one core of the 2-core box: 4.8 ms a query alone, 3.4 in twos, 2.9 in fours),
and a query that finds the model idle waits for nothing. A query's vector does not depend on
its batch (ONNX fp32 gives the same bits alone and padded beside longer ones; the int8 backend
embeds one text per call anyway).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ragindex.protocols import Embedder, Vectors

QUERY_BATCH = 16  # the most queries one call embeds


@dataclass(eq=False)  # a query is itself: two of the same text are two
class _Query:
    text: str
    vector: Vectors | None = None
    error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.vector is not None or self.error is not None

    def result(self) -> Vectors:
        if self.error is not None:
            raise self.error
        assert self.vector is not None
        return self.vector


class SerializedEmbedder:
    """`embedder` for several threads: one model call at a time, single queries batched."""

    def __init__(self, embedder: Embedder, max_batch: int = QUERY_BATCH) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._embedder = embedder
        self._max_batch = max_batch
        self._model = threading.Lock()
        self._queue = threading.Condition()
        self._waiting: list[_Query] = []
        self._leading = False  # a thread is embedding a batch of queries
        self.identity = embedder.identity
        self.max_seq_length = embedder.max_seq_length

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        with self._model:
            return self._embedder.embed_passages(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        if isinstance(texts, str) or len(texts) != 1:  # the embedder says what is wrong
            with self._model:
                return self._embedder.embed_queries(texts)
        query = _Query(texts[0])
        with self._queue:
            self._waiting.append(query)
            while self._leading and not query.done:
                self._queue.wait()
            if query.done:  # another thread's batch took it
                return query.result()
            self._leading = True
            self._waiting.remove(query)
            batch = [query, *self._waiting[: self._max_batch - 1]]
            del self._waiting[: self._max_batch - 1]
        try:
            self._embed(batch)
        except BaseException as err:  # no query of the batch waits for a vector that never comes
            for q in batch:
                if not q.done:
                    q.error = err
            raise
        finally:
            with self._queue:
                self._leading = False
                self._queue.notify_all()
        return query.result()

    def _embed(self, batch: list[_Query]) -> None:
        """Every query of the batch gets its vector; if the batch fails, each is embedded
        alone, so that a failure is only the failing query's."""
        try:
            with self._model:
                vectors = self._embedder.embed_queries([q.text for q in batch])
        except Exception:
            if len(batch) == 1:
                raise
            for q in batch:
                try:
                    with self._model:
                        q.vector = self._embedder.embed_queries([q.text])
                except Exception as err:
                    q.error = err
            return
        for i, q in enumerate(batch):
            q.vector = vectors[i : i + 1]

    def count_tokens(self, text: str) -> int:
        with self._model:
            return self._embedder.count_tokens(text)
