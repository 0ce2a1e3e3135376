"""Generation changes under live writes and searches, on real Kafka and Elasticsearch: the
cluster's parts without pods. Two changes run the same scenario: a reshard (2 -> 3 dense
shards) and an embedder change (MiniLM fp32 -> its int8 ONNX export, another identity).

Two generations' ingest workers consume `docs` (the new one's group replays it from the
start, through the new generation's embedder), each generation's views are its FAISS
replicas and its own Elasticsearch index, the new generation's build report (what its Router
serves at /v1/generation) goes through the operator's `decide_promotion`, and the promotion is
the operator's one `_aliases` call plus the switch of the serving side (the Service).
Searches never fail or come back empty, answer from the old index and identity until the
switch and from the new ones after, and every acknowledged write is in the new generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from ragindex.app.serve.data_plane import ensure_topics
from ragindex.app.serve.generation_report import ReportCut, generation_report
from ragindex.app.serve.query_side import LocalQuerySide
from ragindex.config import RagIndexSpec
from ragindex.errors import BackendUnavailable
from ragindex.generations import (
    BuildReport,
    changed_generation_fields,
    index_generation,
    lexical_index_name,
)
from ragindex.ingest import IngestWorker
from ragindex.lexical import ElasticsearchIndex
from ragindex.log import KafkaLog
from ragindex.measure.evals import Collection
from ragindex.measure.servers import EsServer, KafkaServer
from ragindex.models import SerializedEmbedder, load_embedder
from ragindex.operator import Observed, Verdict, decide_promotion, switch_read_alias
from ragindex.operator.status import rfc3339
from ragindex.protocols import Embedder
from ragindex.records import doc_key, encode_document
from ragindex.serve_config import KAFKA_BOOTSTRAP_ENV
from ragindex.topics import DataPlaneTopics, partition_for_key, plane_topics
from ragindex.types import Document, ModelIdentity

pytestmark = [pytest.mark.kafka, pytest.mark.elasticsearch, pytest.mark.slow]

TENANT = "acme"
SEED = 30
REPORT_TIMEOUT_S = 240.0


def live_docs(cranfield: Collection) -> list[Document]:
    """What the writer writes, in turn: Cranfield's titles past the seed, each a short
    document of its own. Distinct real titles, since the self-check samples live writes too
    (hundreds of near-identical ones, made on a loaded box, left a sampled one out of its own
    top 10 under int8 vectors)."""
    titles = [d.title for d in list(cranfield.corpus.values())[SEED:] if d.title.strip()]
    return [Document("live", f"w{n}", t, t) for n, t in enumerate(dict.fromkeys(titles))]


@dataclass
class Served:
    """One search of the steady load: before or after the switch, and what answered it."""

    switched: bool
    es_index: str  # the index the read alias answered from
    identities: frozenset[ModelIdentity]  # stamped on the serving side's dense replicas


@dataclass
class LiveChange:
    """What a generation change under live writes and searches observed."""

    old: str
    new: str
    alias: str  # the Elasticsearch read alias
    problems: list[str] = field(default_factory=list)  # failed or empty searches
    acked: list[Document] = field(default_factory=list)  # writes Kafka acknowledged
    indexed: set[tuple[str, str]] = field(default_factory=set)  # in the new generation, at end
    reports: list[BuildReport] = field(default_factory=list)
    served: list[Served] = field(default_factory=list)
    last_write_hit: str = ""  # the index the alias found the last write in, after the switch


def change_generation_live(
    kafka_server: KafkaServer,
    es_server: EsServer,
    cranfield: Collection,
    tmp_path: Path,
    change: dict[str, Any],
    old_embedder: Embedder,
    new_embedder: Embedder,
) -> LiveChange:
    """Serve the seed corpus from the old spec, then build the generation that `change` (spec
    sections) makes under steady writes and searches, promote it on its report and switch."""
    name, alias = f"live{uuid.uuid4().hex[:8]}", f"live_{uuid.uuid4().hex[:8]}"
    base: dict[str, Any] = {
        "log": {"docsPartitions": 2},
        "lexical": {
            "backend": "elasticsearch",
            "elasticsearchUrl": es_server.url,
            "elasticsearchAlias": alias,
        },
        "generations": {"selfCheckSample": 5},
        "dense": {"shards": 2},
    }
    old_spec = RagIndexSpec.model_validate(base)
    new_spec = RagIndexSpec.model_validate({**base, **change})
    out = LiveChange(index_generation(old_spec), index_generation(new_spec), alias)
    assert out.old != out.new, changed_generation_fields(old_spec, new_spec)
    old_topics = plane_topics(old_spec, name, "default")
    new_topics = plane_topics(new_spec, name, "default")
    embedders = {
        out.old: SerializedEmbedder(old_embedder),
        out.new: SerializedEmbedder(new_embedder),
    }
    logs = [KafkaLog(kafka_server.bootstrap) for _ in range(3)]  # one per thread
    main_log, writer_log, worker_log = logs
    ensure_topics(main_log, old_topics)
    seed = [d.to_document("cranfield") for d in list(cranfield.corpus.values())[:SEED]]
    to_write = live_docs(cranfield)

    def append(log_: KafkaLog, docs: list[Document]) -> None:
        keys = [doc_key(TENANT, d.source, d.doc_id) for d in docs]
        log_.append(
            old_topics.docs,
            [
                (partition_for_key(k, 2), k, encode_document(d))
                for k, d in zip(keys, docs, strict=True)
            ],
        )

    def worker(spec: RagIndexSpec, topics: DataPlaneTopics) -> IngestWorker:
        embedder = embedders[index_generation(spec)]
        return IngestWorker(worker_log, topics, embedder, spec.chunking, range(2))

    def side(spec: RagIndexSpec, label: str) -> LocalQuerySide:
        s = LocalQuerySide(spec, tmp_path, name, "default", tmp_path / label)
        s.embedder = embedders[index_generation(spec)]
        assert s.try_open()
        return s

    def identities(s: LocalQuerySide) -> frozenset[ModelIdentity]:
        assert s.dense is not None
        return frozenset(r.shard.identity for r in s.dense.replicas)

    # The serving generation, with the seed corpus.
    append(main_log, seed)
    live = worker(old_spec, old_topics)
    while live.poll(64):
        pass
    serving = old_side = side(old_spec, "old")
    old_side.refresh()
    es = Elasticsearch(es_server.url, request_timeout=10)

    lock = threading.Lock()  # a LocalQuerySide belongs to one thread at a time
    stop_writes, stop_all = threading.Event(), threading.Event()
    switched = False

    def writer() -> None:
        for d in to_write:
            if stop_writes.is_set():
                break
            append(writer_log, [d])  # returns once Kafka acknowledged
            out.acked.append(d)
            time.sleep(0.3)  # a steady trickle: the workers never see an idle log

    def workers() -> None:
        backfill = worker(new_spec, new_topics)
        while not stop_all.is_set():
            busy = live.poll(16) | backfill.poll(16)
            if not busy:
                time.sleep(0.05)

    def searcher() -> None:
        n = 0
        while not stop_all.is_set():
            target = seed[n % SEED]
            with lock:
                # As a replica's refresh loop: a failed round (Elasticsearch slow to take a
                # bulk write on a loaded box) is retried at the next; searches go on.
                with contextlib.suppress(BackendUnavailable):
                    serving.refresh()
                try:
                    hits = serving.search(TENANT, target.title, 10, "hybrid", False).hits
                    found = es.search(index=alias, query={"match_all": {}}, size=1)
                    index = found["hits"]["hits"][0]["_index"]
                except Exception as err:  # reported below: a search must never fail
                    out.problems.append(f"search failed: {err!r}")
                    continue
                finally:
                    n += 1
                if target.doc_id not in {h.chunk.doc_id for h in hits}:
                    out.problems.append(f"{target.doc_id} missing for its own title")
                out.served.append(Served(switched, index, identities(serving)))

    threads = [threading.Thread(target=f) for f in (writer, workers, searcher)]
    ensure_topics(main_log, new_topics)
    for t in threads:
        t.start()
    new_side = side(new_spec, "new")
    try:
        # The new generation's build report, as its Router would serve it, until it may be
        # promoted; progress is seen on the way.
        deadline = time.monotonic() + REPORT_TIMEOUT_S
        held = ReportCut()  # where the report stands, as the Router keeps it between reports
        while time.monotonic() < deadline:
            with lock:
                report, held = generation_report(
                    main_log, new_topics, out.new, new_side, 5, new_side.behind, held
                )
            out.reports.append(report)
            if report.checks is not None:
                break
            time.sleep(0.5)
        final = out.reports[-1]
        assert final.checks is not None, f"never verified: {out.reports[-3:]}"
        assert not final.failed, final
        moment = datetime.now(UTC)
        ready = Verdict(True, "Serving", "RayService ready")
        action = decide_promotion(
            {"activeGeneration": out.old},
            Observed(final.generation, ready, final, rfc3339(moment), moment, 3600.0),
        )
        assert (action.kind, action.active) == ("promote", out.new)
        with lock:  # the switch: the read alias (one _aliases call), then the Service
            target_index = lexical_index_name(alias, action.active)
            asyncio.run(switch_read_alias(es_server.url, alias, target_index))
            serving, switched = new_side, True
        time.sleep(1.5)  # writes and searches go on against the new generation
        stop_writes.set()
        # Every acknowledged write reaches the new generation (the workers keep running).
        keys = {("live", d.doc_id) for d in out.acked}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                with contextlib.suppress(BackendUnavailable):
                    new_side.refresh()
                out.indexed = new_side.dense.document_keys(TENANT) if new_side.dense else set()
            if keys <= out.indexed:
                break
            time.sleep(0.2)
        stop_all.set()
        for t in threads:
            t.join(60)
        last = out.acked[-1]  # written after the switch: in the index the alias now reads
        query = {"match": {"title": last.title}}
        hits = es.search(index=alias, query=query, size=3)["hits"]["hits"]
        out.last_write_hit = hits[0]["_index"] if hits else ""
    finally:
        stop_writes.set()
        stop_all.set()
        for t in threads:
            t.join(60)
        for s in {old_side, new_side}:
            s.close()
        for log_ in logs:
            log_.close()
        es.close()
        ElasticsearchIndex(es_server.url, alias).drop()
    return out


def assert_nothing_lost(out: LiveChange) -> None:
    """0 failed or empty searches, every acknowledged write in the new generation, progress
    reported on the way, and the old index answered before the switch, the new one after."""
    assert out.problems == [], out.problems[:5]
    keys = {("live", d.doc_id) for d in out.acked}
    assert len(out.acked) > 5 and keys <= out.indexed, sorted(keys - out.indexed)[:5]
    assert len(out.indexed) == SEED + len(out.acked)
    progress = [r.consumed for r in out.reports]
    assert progress == sorted(progress) and len(out.reports) > 1
    assert out.reports[-1].generation == out.new
    old_index, new_index = (lexical_index_name(out.alias, g) for g in (out.old, out.new))
    assert {s.es_index for s in out.served if not s.switched} == {old_index}
    assert {s.es_index for s in out.served if s.switched} == {new_index}
    assert out.last_write_hit == new_index


def served_identities(out: LiveChange, switched: bool) -> set[ModelIdentity]:
    return set().union(*(s.identities for s in out.served if s.switched == switched))


def test_reshard_under_live_writes_and_searches_loses_nothing(
    kafka_server: KafkaServer,
    es_server: EsServer,
    minilm: Embedder,
    cranfield: Collection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KAFKA_BOOTSTRAP_ENV, kafka_server.bootstrap)  # the sides' open_log
    change = {"dense": {"shards": 3}}
    out = change_generation_live(
        kafka_server, es_server, cranfield, tmp_path, change, minilm, minilm
    )
    assert_nothing_lost(out)
    assert served_identities(out, False) == served_identities(out, True) == {minilm.identity}


def test_embedder_change_under_live_writes_and_searches_loses_nothing(
    kafka_server: KafkaServer,
    es_server: EsServer,
    minilm: Embedder,
    cranfield: Collection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KAFKA_BOOTSTRAP_ENV, kafka_server.bootstrap)
    change = {"embedder": {"backend": "onnx-int8"}}
    int8 = load_embedder(RagIndexSpec.model_validate(change).embedder)
    assert int8.identity != minilm.identity and int8.identity.quantization
    out = change_generation_live(kafka_server, es_server, cranfield, tmp_path, change, minilm, int8)
    assert_nothing_lost(out)
    # The old identity answered until the switch, the new one after: the new generation's
    # replicas are stamped with it (a query vector of another identity is refused).
    assert served_identities(out, False) == {minilm.identity}
    assert served_identities(out, True) == {int8.identity}
