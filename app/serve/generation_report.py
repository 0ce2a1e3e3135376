"""A generation's build report: how far its backfill got and whether it may be promoted.

The cluster's operator promotes a new generation only on this report
(`ragindex.generations.BuildReport`), which the generation's own Router serves at
`GET /v1/generation` (`ragindex.operator.promotion`). The embedded runtime's `ragindex reindex`
gathers the same evidence (`gather_evidence`) with its backfill worker paused.

In the cluster the generation's ingest workers keep consuming while the report is made, so the
checks look at a consistent cut: the corpus as of the offsets consumed at the start (`before`),
the views' documents once they applied every chunk produced up to then, and every document
written between `before` and the end of the check (`after`) left out of the comparison on both
sides (its chunks may or may not be in the views yet; the next report covers it).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ragindex.app.serve.ingest_deployment import applied_target
from ragindex.generations import (
    SELF_CHECK_TOP_K,
    BuildReport,
    PromotionEvidence,
    backfill_goal,
    build_report,
    self_check_sample,
)
from ragindex.protocols import Log
from ragindex.records import DocKey, decode_document
from ragindex.router import SearchResult
from ragindex.topics import DataPlaneTopics
from ragindex.types import Document

T = TypeVar("T")

VIEWS_WAIT_S = 2.0  # the views trail the log by about their refresh interval
VIEWS_POLL_S = 0.05


class _Dense(Protocol):
    def document_keys(self, tenant_id: str) -> set[tuple[str, str]]: ...


class ReportSide(Protocol):
    """What the report reads of a generation's query side (Local or Cluster)."""

    @property
    def dense(self) -> _Dense | None: ...

    def search(
        self, tenant_id: str, query: str, k: int | None, mode: str, rerank: bool | None
    ) -> SearchResult: ...


def consumed_offsets(log_: Log, topics: DataPlaneTopics) -> dict[int, int]:
    """`docs` partition -> the next offset the generation's ingest group has not committed."""
    return {p: log_.committed(topics.group, topics.docs, p) for p in range(topics.docs_partitions)}


def end_offsets(log_: Log, topics: DataPlaneTopics) -> dict[int, int]:
    return {p: log_.end_offset(topics.docs, p) for p in range(topics.docs_partitions)}


def live_documents(
    log_: Log, topics: DataPlaneTopics, upto: dict[int, int]
) -> dict[DocKey, Document]:
    """The corpus as of `upto` (partition -> offset): each key's newest value, minus deletes."""
    return _live(log_, topics, upto, lambda d: d)


def live_titles(log_: Log, topics: DataPlaneTopics, upto: dict[int, int]) -> dict[DocKey, str]:
    """The title of every live document as of `upto`: what the checks need of the corpus, so a
    report holds keys and titles, never the texts."""
    return _live(log_, topics, upto, lambda d: d.title)


def _live(
    log_: Log, topics: DataPlaneTopics, upto: dict[int, int], keep: Callable[[Document], T]
) -> dict[DocKey, T]:
    docs: dict[DocKey, T | None] = {}
    for partition, end in upto.items():
        offset = log_.begin_offset(topics.docs, partition)
        while offset < end:
            records = log_.read(topics.docs, partition, offset, max_records=5000)
            if not records:
                break
            for r in records:
                if r.offset >= end:
                    break
                key = DocKey.decode(r.key)
                docs[key] = None if r.value is None else keep(decode_document(r.value))
            offset = records[-1].offset + 1
    return {k: d for k, d in docs.items() if d is not None}


def written_between(
    log_: Log, topics: DataPlaneTopics, before: Mapping[int, int], after: Mapping[int, int]
) -> set[DocKey]:
    """Documents written (or deleted) at `docs` offsets in [before, after)."""
    keys: set[DocKey] = set()
    for partition, end in after.items():
        offset = before.get(partition, 0)
        while offset < end:
            records = log_.read(topics.docs, partition, offset, max_records=5000)
            if not records:
                break
            keys.update(DocKey.decode(r.key) for r in records if r.offset < end)
            offset = records[-1].offset + 1
    return keys


def gather_evidence(
    log_: Log,
    topics: DataPlaneTopics,
    side: ReportSide,
    sample_size: int,
    consumed: Mapping[int, int],
    ends: Mapping[int, int],
    settled: Callable[[], Mapping[int, int]] | None = None,
) -> PromotionEvidence:
    """The promotion evidence of the generation `side` reads, for the corpus as of `consumed`.

    `settled` (the cluster: writers and workers go on) returns `docs` offsets taken after the
    views were read; documents written in between are left out on both sides.
    """
    corpus = live_titles(log_, topics, dict(consumed))
    assert side.dense is not None
    tenants = sorted({k.tenant_id for k in corpus})
    views = {t: side.dense.document_keys(t) for t in tenants}
    moving: set[DocKey] = set()
    if settled is not None:
        moving = written_between(log_, topics, consumed, settled())
    stable = {k: title for k, title in corpus.items() if k not in moving}
    moving_docs = {(k.tenant_id, k.source, k.doc_id) for k in moving}
    indexed = {
        t: sum(1 for s, d in keys if (t, s, d) not in moving_docs) for t, keys in views.items()
    }
    sample = self_check_sample(
        [k.encode() for k, title in stable.items() if title.strip()], sample_size
    )
    missed = []
    for key_bytes in sample:
        key = DocKey.decode(key_bytes)
        hits = side.search(key.tenant_id, stable[key], SELF_CHECK_TOP_K, "dense", False).hits
        if (key.source, key.doc_id) not in {(h.chunk.source, h.chunk.doc_id) for h in hits}:
            missed.append(key_bytes.decode())
    return PromotionEvidence(
        docs_end=dict(ends),
        consumed=dict(consumed),
        documents=dict(Counter(k.tenant_id for k in stable)),
        indexed=indexed,
        self_check_missed=missed,
        self_check_sampled=len(sample),
    )


@dataclass(frozen=True)
class ReportCut:
    """Where a generation's build report stands between two reports (its Router keeps it).

    Under steady writes each stage is held until it is reached, never moved at every report:
    a goal moved to "now" each time would need the workers, then the views, to trail the
    writes by less than the interval between reports, which a loaded node does not give.
    """

    docs_goal: dict[int, int] | None = None  # `docs` offsets the backfill must consume first
    cut: dict[int, int] | None = None  # the consumed offsets once it did: the checked corpus
    chunk_goal: list[int] | None = None  # per shard, the chunk offset that holds the cut


def generation_report(
    log_: Log,
    topics: DataPlaneTopics,
    generation: str,
    side: ReportSide,
    sample_size: int,
    views_behind: Callable[[list[int]], list[str]],
    held: ReportCut | None = None,
    views_wait_s: float = VIEWS_WAIT_S,
) -> tuple[BuildReport, ReportCut]:
    """The report the generation's Router serves, and the state to pass back as `held` next
    time.

    First the backfill must reach its goal (`backfill_goal`: everything that was in `docs`
    when the goal was set); the offsets it consumed by then are the cut. Then the views must
    apply the chunks produced up to the cut (`views_behind(chunk offsets)` empty, polled for up
    to `views_wait_s`, and again at the next reports: the cut is held), and the checks run on
    the cut. Until both hold the report has no checks: while backfilling it counts the records
    consumed of `docs` (the operator shows Backfilling n%); once the cut is taken it counts
    the cut as consumed and names the view replicas it waits on (Verifying)."""
    held = held or ReportCut()
    if held.cut is None or held.chunk_goal is None:
        consumed = consumed_offsets(log_, topics)
        ends = end_offsets(log_, topics)
        reached, goal = backfill_goal(held.docs_goal, consumed, ends)
        if not reached:
            done = sum(min(c, ends[p]) for p, c in consumed.items())
            return BuildReport(generation, done, sum(ends.values())), ReportCut(docs_goal=goal)
        # Read after `consumed`: every chunk produced for the cut is below these offsets.
        chunk_goal = [applied_target(log_, topics.chunks, s) for s in range(topics.shards)]
        held = ReportCut(cut=consumed, chunk_goal=chunk_goal)
    assert held.cut is not None and held.chunk_goal is not None
    deadline = time.monotonic() + views_wait_s
    while behind := views_behind(held.chunk_goal):
        if time.monotonic() > deadline:
            size = sum(held.cut.values())
            return BuildReport(generation, size, size, waiting_on=tuple(behind)), held
        time.sleep(VIEWS_POLL_S)
    evidence = gather_evidence(
        log_,
        topics,
        side,
        sample_size,
        held.cut,
        held.cut,  # caught up as of the cut; what was written since is left out
        # Anything in the views was written before they were read: a document whose chunks
        # are applied but whose `docs` offset is not committed yet is left out too.
        settled=lambda: end_offsets(log_, topics),
    )
    return build_report(generation, evidence), ReportCut()
