"""`ragindex reindex` on one machine: backfill from the file log, verify, promote, roll back.

Real parts: the file log, the packaged MiniLM, FAISS and tantivy views. A slice of Cranfield
(SLICE documents and the queries judged on them) keeps it near a minute on 2 cores.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from ragindex.app import APP_NAME, Reindex
from ragindex.app.cli import main
from ragindex.app.embedded import ingest_through_log
from ragindex.app.generation_record import read_record, serving_spec
from ragindex.app.reindex import retire_expired
from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, replica_dir
from ragindex.app.serve.generation_report import (
    ReportCut,
    consumed_offsets,
    gather_evidence,
    generation_report,
)
from ragindex.app.serve.query_side import LocalQuerySide
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.generations import (
    BuildReport,
    PromotionRefused,
    index_generation,
    promotion_failures,
)
from ragindex.log import FileLog
from ragindex.measure.evals import Collection
from ragindex.measure.evals.metrics import ndcg_at_k
from ragindex.models import SerializedEmbedder
from ragindex.protocols import Embedder, Vectors
from ragindex.records import doc_key, encode_document
from ragindex.topics import partition_for_key, plane_topics
from ragindex.types import Document

pytestmark = pytest.mark.slow

TENANT = "acme"
SOURCE = "cranfield"
SLICE = 200
OLD = RagIndexSpec.model_validate({"dense": {"shards": 2}, "log": {"docsPartitions": 3}})
RESHARDED = RagIndexSpec.model_validate({"dense": {"shards": 3}, "log": {"docsPartitions": 3}})


class ScrambledPassages:
    """Fault injection: passages get vectors unrelated to their text (a broken embedder)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.max_seq_length = inner.max_seq_length
        self.rng = np.random.default_rng(7)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        v = self.rng.normal(size=(len(texts), self.identity.dimension)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self.inner.embed_queries(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)


@pytest.fixture(scope="module")
def sliced(cranfield: Collection) -> tuple[list[Document], dict[str, dict[str, int]]]:
    docs = list(cranfield.corpus.values())[:SLICE]
    ids = {d.doc_id for d in docs}
    qrels = {
        q: {d: g for d, g in rel.items() if d in ids and g > 0}
        for q, rel in cranfield.qrels.items()
        if q in cranfield.queries
    }
    return [d.to_document(SOURCE) for d in docs], {q: r for q, r in qrels.items() if r}


@pytest.fixture(scope="module")
def shared(minilm: Embedder) -> Embedder:
    """One model, one call at a time: the backfill and the query load share it across threads."""
    return SerializedEmbedder(minilm)


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory,
    shared: Embedder,
    sliced: tuple[list[Document], dict[str, dict[str, int]]],
) -> Path:
    """A data dir serving OLD with the slice ingested; tests copy it."""
    data_dir = tmp_path_factory.mktemp("built") / "data"
    ingest_through_log(data_dir, OLD, shared, TENANT, sliced[0])
    return data_dir


@pytest.fixture
def data_dir(built: Path, tmp_path: Path) -> Iterator[Path]:
    copy = tmp_path / "data"
    shutil.copytree(built, copy)
    yield copy


def open_side(data_dir: Path, spec: RagIndexSpec, embedder: Embedder, name: str) -> LocalQuerySide:
    side = LocalQuerySide(
        spec, data_dir, APP_NAME, DEFAULT_NAMESPACE, replica_dir(data_dir, spec, name, 0)
    )
    side.embedder = embedder  # the shared SerializedEmbedder
    assert side.try_open()
    return side


def mean_ndcg(
    side: LocalQuerySide, cranfield: Collection, qrels: dict[str, dict[str, int]]
) -> float:
    scores = []
    for qid, rel in qrels.items():
        hits = side.search(TENANT, cranfield.queries[qid].text, 10, "dense", False).hits
        ranked = list(dict.fromkeys(h.chunk.doc_id for h in hits))
        scores.append(ndcg_at_k(ranked, rel, 10))
    return sum(scores) / len(scores)


def live_doc(n: int) -> Document:
    return Document(
        SOURCE, f"live{n}", f"zeppelin mooring mast number {n}", f"airship docking study {n}"
    )


def test_reshard_keeps_ndcg_and_the_old_generation_answers_throughout(
    data_dir: Path,
    shared: Embedder,
    cranfield: Collection,
    sliced: tuple[list[Document], dict[str, dict[str, int]]],
) -> None:
    _, qrels = sliced
    old_side = open_side(data_dir, OLD, shared, "test-old")
    before = mean_ndcg(old_side, cranfield, qrels)
    queries = [cranfield.queries[q].text for q in qrels]

    answered: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def query_load() -> None:  # the serving generation keeps answering during the reindex
        n = 0
        while not stop.is_set() and not errors:
            old_side.refresh()
            try:
                hits = old_side.search(TENANT, queries[n % len(queries)], 10, "hybrid", False).hits
            except Exception as err:  # reported by the test below
                errors.append(err)
            else:
                answered.append(len(hits))
            n += 1

    reindex = Reindex(data_dir, RESHARDED, embedder=shared, serving_embedder=shared)
    written = []

    def progress(consumed: int, total: int) -> None:
        if len(written) < 3:  # live writes while the backfill runs
            d = live_doc(len(written))
            key = doc_key(TENANT, d.source, d.doc_id)
            reindex.log.append(
                reindex.topics.docs, [(partition_for_key(key, 3), key, encode_document(d))]
            )
            written.append(d)

    loader = threading.Thread(target=query_load)
    loader.start()
    try:
        report = reindex.run(progress)
    finally:
        stop.set()
        loader.join()
        reindex.close()
    assert errors == [] and len(answered) > 0 and min(answered) == 10, (errors, answered)

    new = index_generation(RESHARDED)
    record = read_record(data_dir)
    assert record is not None and record.active == new
    assert record.generations[index_generation(OLD)].state == "retained"
    assert report.documents == {TENANT: SLICE + len(written)}
    assert report.self_check_sampled == OLD.generations.self_check_sample
    assert serving_spec(data_dir, None) == RESHARDED

    new_side = open_side(data_dir, RESHARDED, shared, "test-new")
    try:
        after = mean_ndcg(new_side, cranfield, qrels)
        assert after == pytest.approx(before, abs=0.005), (before, after)
        for d in written:  # acknowledged during the backfill: in both generations
            for side in (new_side, old_side):
                side.refresh()
                hits = side.search(TENANT, d.title, 3, "hybrid", False).hits
                assert d.doc_id in {h.chunk.doc_id for h in hits}
    finally:
        new_side.close()
        old_side.close()
    print(f"nDCG@10 dense on {len(qrels)} queries: before {before:.4f}, after {after:.4f}")

    # `ragindex reindex --rollback` (the CLI): the retained generation serves again.
    assert main(["reindex", "--rollback", "--data-dir", str(data_dir)]) == 0
    record = read_record(data_dir)
    assert record is not None and record.active == index_generation(OLD)
    assert record.generations[new].state == "retained"

    # Past the window, a retained generation's topic and replica directories are deleted.
    log = FileLog(data_dir / "log")
    try:
        record = retire_expired(data_dir, log, time.time() + 25 * 3600)
        assert record.active == index_generation(OLD) and new not in record.generations
        with pytest.raises(InvalidInput):
            log.partitions(plane_topics(RESHARDED, APP_NAME, DEFAULT_NAMESPACE).chunks)
        assert not (data_dir / "replicas" / new).exists()
    finally:
        log.close()


def test_a_failed_self_check_is_not_promoted(data_dir: Path, shared: Embedder) -> None:
    broken = RagIndexSpec.model_validate(
        {"dense": {"shards": 2, "hnsw": {"m": 16}}, "log": {"docsPartitions": 3}}
    )
    reindex = Reindex(data_dir, broken, embedder=ScrambledPassages(shared), serving_embedder=shared)
    try:
        with pytest.raises(PromotionRefused) as refused:
            reindex.run()
    finally:
        reindex.close()
    assert [f.split(":")[0] for f in refused.value.failures] == ["self-check"]
    record = read_record(data_dir)
    assert record is not None and record.active == index_generation(OLD)
    entry = record.generations[index_generation(broken)]
    assert entry.state == "failed" and entry.reason.startswith("self-check")
    with pytest.raises(InvalidInput, match="needs a new index generation"):
        spec_file = data_dir / "broken.yaml"
        spec_file.write_text("dense:\n  shards: 2\n  hnsw:\n    m: 16\nlog:\n  docsPartitions: 3\n")
        serving_spec(data_dir, spec_file)


def test_reindex_refuses_what_needs_no_rebuild_and_changes_nothing(
    data_dir: Path, shared: Embedder
) -> None:
    before = (data_dir / "generations.json").read_bytes()
    in_place = RagIndexSpec.model_validate(
        {"dense": {"shards": 2, "hnsw": {"efSearch": 32}}, "log": {"docsPartitions": 3}}
    )
    with pytest.raises(InvalidInput, match="already serving"):
        Reindex(data_dir, in_place, embedder=shared, serving_embedder=shared)
    assert (data_dir / "generations.json").read_bytes() == before
    in_place_file = data_dir.parent / "in-place.yaml"
    in_place_file.write_text("dense:\n  hnsw:\n    efSearch: 32\nlog:\n  docsPartitions: 3\n")
    assert main(["reindex", "--spec", str(in_place_file), "--data-dir", str(data_dir)]) == 2
    assert main(["reindex", "--rollback", "--data-dir", str(data_dir)]) == 2
    assert (data_dir / "generations.json").read_bytes() == before


def test_the_build_report_shows_progress_then_checks_on_a_consistent_cut(
    data_dir: Path, shared: Embedder
) -> None:
    """What a generation's Router serves at /v1/generation, on the same file log."""
    reindex = Reindex(data_dir, RESHARDED, embedder=shared, serving_embedder=shared)
    side = open_side(data_dir, RESHARDED, shared, "test-report")
    new = index_generation(RESHARDED)

    def report() -> BuildReport:
        return generation_report(reindex.log, reindex.topics, new, side, 5, side.behind)[0]

    try:
        reindex.backfill.poll(32)
        partial = report()
        assert partial.checks is None and 0 < partial.consumed < partial.end == SLICE
        reindex.catch_up()
        done = report()
        assert (done.consumed, done.end) == (SLICE, SLICE)
        assert done.checks == {"caught-up": "", "chunk-counts": "", "self-check": ""}

        # A write the workers consume while the checks run (the cluster's workers never
        # pause): counted on neither side, so it cannot fail the chunk counts.
        before = consumed_offsets(reindex.log, reindex.topics)
        d = live_doc(99)
        key = doc_key(TENANT, d.source, d.doc_id)
        reindex.log.append(
            reindex.topics.docs, [(partition_for_key(key, 3), key, encode_document(d))]
        )
        reindex.catch_up()
        side.refresh()
        after = consumed_offsets(reindex.log, reindex.topics)
        cut = gather_evidence(
            reindex.log, reindex.topics, side, 5, before, before, settled=lambda: after
        )
        assert promotion_failures(cut) == []
        assert cut.documents == cut.indexed == {TENANT: SLICE}
        naive = gather_evidence(reindex.log, reindex.topics, side, 5, before, before)
        assert naive.indexed == {TENANT: SLICE + 1}  # what the cut protects against
    finally:
        side.close()
        reindex.close()


def test_views_that_trail_the_cut_past_a_report_are_checked_on_that_cut_later(
    data_dir: Path, shared: Embedder
) -> None:
    """Found on real pods: under steady writes a new generation stayed "Backfilling 99%" for
    10 minutes, because each report whose views did not apply the cut within its short wait
    moved the goal to the new end of `docs`. The cut is held across reports instead."""
    reindex = Reindex(data_dir, RESHARDED, embedder=shared, serving_embedder=shared)
    side = open_side(data_dir, RESHARDED, shared, "test-held-cut")
    new = index_generation(RESHARDED)
    lagging = True  # fault injection: the views say they have not applied the cut yet

    def views_behind(goal: list[int]) -> list[str]:
        return ["Shard0 replica a: applied p0@0 of p0@9"] if lagging else side.behind(goal)

    def report(held: ReportCut) -> tuple[BuildReport, ReportCut]:
        return generation_report(
            reindex.log, reindex.topics, new, side, 5, views_behind, held, views_wait_s=0
        )

    try:
        reindex.catch_up()
        verifying, held = report(ReportCut())
        assert verifying.checks is None and (verifying.consumed, verifying.end) == (SLICE, SLICE)
        assert held.cut == consumed_offsets(reindex.log, reindex.topics)
        for n in range(3):  # writes go on, the workers consume them, the views still trail
            d = live_doc(200 + n)
            key = doc_key(TENANT, d.source, d.doc_id)
            reindex.log.append(
                reindex.topics.docs, [(partition_for_key(key, 3), key, encode_document(d))]
            )
            reindex.catch_up()
            side.refresh()
            again, held_again = report(held)
            assert held_again == held  # the cut stays where it was taken
            assert again.checks is None and again.consumed == again.end == SLICE
            assert again.waiting_on == ("Shard0 replica a: applied p0@0 of p0@9",)
        lagging = False
        checked, after = report(held)
        assert checked.checks == {"caught-up": "", "chunk-counts": "", "self-check": ""}
        assert (checked.consumed, checked.end) == (SLICE, SLICE)  # the newer writes left out
        assert after == ReportCut()  # the next report takes a new goal
    finally:
        side.close()
        reindex.close()
