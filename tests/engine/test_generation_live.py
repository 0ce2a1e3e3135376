"""A reshard (2 -> 3 dense shards) under live writes and searches, on real Kafka and
Elasticsearch: the cluster's parts without pods.

Two generations' ingest workers consume `docs` (the new one's group replays it from the
start), each generation's views are its FAISS replicas and its own Elasticsearch index, the
new generation's build report (what its Router serves at /v1/generation) goes through the
operator's `decide_promotion`, and the promotion is the operator's one `_aliases` call plus
the switch of the serving side (the Service). Searches never fail or come back empty,
answer from the old index until the switch and from the new one after, and every
acknowledged write is in the new generation.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from ragindex.app.serve.data_plane import ensure_topics, plane_topics
from ragindex.app.serve.generation_report import generation_report
from ragindex.app.serve.query_side import LocalQuerySide, SerializedEmbedder
from ragindex.config import RagIndexSpec
from ragindex.evals.collections import Collection
from ragindex.generations import BuildReport, index_generation, lexical_index_name
from ragindex.ingest.worker import DataPlaneTopics, IngestWorker
from ragindex.lexical.elasticsearch_index import ElasticsearchIndex
from ragindex.lexical.es_server import EsServer
from ragindex.log.kafka_log import KafkaLog
from ragindex.log.kafka_server import KafkaServer
from ragindex.operator.generation_io import switch_read_alias
from ragindex.operator.promotion import Observed, decide_promotion
from ragindex.operator.status import Verdict, rfc3339
from ragindex.protocols import Embedder
from ragindex.records import doc_key, encode_document
from ragindex.serve_config import KAFKA_BOOTSTRAP_ENV
from ragindex.topics import partition_for_key
from ragindex.types import Document

pytestmark = [pytest.mark.kafka, pytest.mark.elasticsearch, pytest.mark.slow]

TENANT = "acme"
SEED = 30
REPORT_TIMEOUT_S = 240.0


def live_doc(n: int) -> Document:
    return Document("live", f"w{n}", f"zeppelin mooring mast {n}", f"airship docking mast {n}")


def test_reshard_under_live_writes_and_searches_loses_nothing(
    kafka_server: KafkaServer,
    es_server: EsServer,
    minilm: Embedder,
    cranfield: Collection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KAFKA_BOOTSTRAP_ENV, kafka_server.bootstrap)  # the sides' open_log
    name, alias = f"live{uuid.uuid4().hex[:8]}", f"live_{uuid.uuid4().hex[:8]}"
    base: dict[str, Any] = {
        "log": {"docsPartitions": 2},
        "lexical": {
            "backend": "elasticsearch",
            "elasticsearchUrl": es_server.url,
            "elasticsearchAlias": alias,
        },
        "generations": {"selfCheckSample": 5},
    }
    old_spec = RagIndexSpec.model_validate({**base, "dense": {"shards": 2}})
    new_spec = RagIndexSpec.model_validate({**base, "dense": {"shards": 3}})
    old, new = index_generation(old_spec), index_generation(new_spec)
    old_topics = plane_topics(old_spec, name, "default")
    new_topics = plane_topics(new_spec, name, "default")
    embedder = SerializedEmbedder(minilm)
    logs = [KafkaLog(kafka_server.bootstrap) for _ in range(3)]  # one per thread
    main_log, writer_log, worker_log = logs
    ensure_topics(main_log, old_topics)
    seed = [d.to_document("cranfield") for d in list(cranfield.corpus.values())[:SEED]]

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
        return IngestWorker(worker_log, topics, embedder, spec.chunking, range(2))

    def side(spec: RagIndexSpec, label: str) -> LocalQuerySide:
        s = LocalQuerySide(spec, tmp_path, name, "default", tmp_path / label)
        s.embedder = embedder
        assert s.try_open()
        return s

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
    acked: list[Document] = []
    problems: list[str] = []
    read_indexes: list[tuple[bool, str]] = []  # (switched yet, index the alias answered from)
    switched = False

    def writer() -> None:
        n = 0
        while not stop_writes.is_set():
            d = live_doc(n)
            append(writer_log, [d])  # returns once Kafka acknowledged
            acked.append(d)
            n += 1
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
                serving.refresh()
                try:
                    hits = serving.search(TENANT, target.title, 10, "hybrid", False).hits
                except Exception as err:  # reported below
                    problems.append(f"search failed: {err!r}")
                    continue
                if target.doc_id not in {h.chunk.doc_id for h in hits}:
                    problems.append(f"{target.doc_id} missing for its own title")
                found = es.search(index=alias, query={"match_all": {}}, size=1)
                read_indexes.append((switched, found["hits"]["hits"][0]["_index"]))
            n += 1

    threads = [threading.Thread(target=f) for f in (writer, workers, searcher)]
    ensure_topics(main_log, new_topics)
    for t in threads:
        t.start()
    new_side = side(new_spec, "new")
    try:
        # The new generation's build report, as its Router would serve it, until it may be
        # promoted; progress is seen on the way.
        seen: list[BuildReport] = []
        deadline = time.monotonic() + REPORT_TIMEOUT_S

        goal = None  # docs end offsets as the previous report saw them (the Router keeps them)
        while time.monotonic() < deadline:
            with lock:
                report, goal = generation_report(
                    main_log, new_topics, new, new_side, 5, new_side.applied, goal
                )
            seen.append(report)
            if report.checks is not None:
                break
            time.sleep(0.5)
        assert seen[-1].checks is not None, f"never verified: {seen[-3:]}"
        assert not seen[-1].failed, seen[-1]
        moment = datetime.now(UTC)
        ready = Verdict(True, "Serving", "RayService ready")
        action = decide_promotion(
            {"activeGeneration": old},
            Observed(new, ready, seen[-1], rfc3339(moment), moment, 3600.0),
        )
        assert (action.kind, action.active) == ("promote", new)
        with lock:  # the switch: the read alias (one _aliases call), then the Service
            asyncio.run(switch_read_alias(es_server.url, alias, lexical_index_name(alias, new)))
            serving, switched = new_side, True
        time.sleep(1.5)  # writes and searches go on against the new generation
        stop_writes.set()
        written = len(acked)
        # Every acknowledged write reaches the new generation (the workers keep running).
        keys = {("live", d.doc_id) for d in acked}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                new_side.refresh()
                indexed = new_side.dense.document_keys(TENANT) if new_side.dense else set()
            if keys <= indexed:
                break
            time.sleep(0.2)
        stop_all.set()
        for t in threads:
            t.join(60)
    finally:
        stop_writes.set()
        stop_all.set()
        for t in threads:
            t.join(60)
        for s in {old_side, new_side}:
            s.close()

    assert problems == [], problems[:5]
    assert written > 5 and keys <= indexed, sorted(keys - indexed)[:5]
    assert len(indexed) == SEED + written
    progress = [r.consumed for r in seen]
    assert progress == sorted(progress) and len(seen) > 1  # progress was reported on the way
    before = {i for s, i in read_indexes if not s}
    after = {i for s, i in read_indexes if s}
    assert before == {lexical_index_name(alias, old)}
    assert after == {lexical_index_name(alias, new)}
    last = acked[-1]  # written after the switch: in the index the alias now reads
    hits = es.search(index=alias, query={"match": {"title": last.title}}, size=3)["hits"]["hits"]
    assert hits and hits[0]["_index"] == lexical_index_name(alias, new)
    for log_ in logs:
        log_.close()
    es.close()
    ElasticsearchIndex(es_server.url, alias).drop()
