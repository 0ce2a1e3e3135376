"""HTTP API v1 end to end: a real local Serve app, real MiniLM, real HTTP."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ragindex.router import create_token
from ragindex.router.api_models import MAX_BATCH_DOCUMENTS
from ragindex.router.http import MAX_BODY_BYTES
from ragindex.types import MAX_DOCUMENT_CHARS

if TYPE_CHECKING:  # fixtures come from conftest.py; pytest's importlib mode cannot import it
    from conftest import ServedApp

pytestmark = pytest.mark.serve

DOCS = [
    {
        "source": "wiki",
        "doc_id": "lighthouse",
        "title": "Lighthouses",
        "text": "A lighthouse is a tower with a bright lamp that guides ships at night"
        " along dangerous coasts and harbour entrances.",
    },
    {
        "source": "wiki",
        "doc_id": "volcano",
        "title": "Volcanoes",
        "text": "A volcano is a rupture in the crust of a planet where lava, ash and gases"
        " escape from a magma chamber below the surface.",
    },
    {
        "source": "wiki",
        "doc_id": "bread",
        "title": "Bread",
        "text": "Bread is baked from a dough of flour and water, leavened with yeast"
        " and shaped into loaves before it goes into a hot oven.",
        "updated": "2024-05-01T12:00:00+00:00",
        "metadata": {"lang": "en"},
    },
]
SECRET = (
    "The launch code for project nightjar is stored in the blue cabinet behind the"
    " observatory telescope mirror."
)


@pytest.fixture(scope="module")
def tokens(served: ServedApp) -> dict[str, str]:
    return {t: create_token(served.data_dir, t) for t in ("alpha", "beta")}


@pytest.fixture(scope="module")
def loaded(served: ServedApp, tokens: dict[str, str]) -> ServedApp:
    with served.client(tokens["alpha"]) as client:
        r = client.post("/v1/documents", json={"documents": DOCS}, params=WAIT)
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
    with served.client(tokens["beta"]) as client:
        secret = {"source": "vault", "doc_id": "nightjar", "title": "Vault", "text": SECRET}
        r = client.post("/v1/documents", json={"documents": [secret]}, params=WAIT)
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
    return served


WAIT = {"wait": "true", "wait_timeout_s": "30"}


def search(client: Any, query: str, **kw: Any) -> dict[str, Any]:
    r = client.post("/v1/search", json={"query": query, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_upsert_is_acknowledged_by_the_log_and_applied_with_wait(
    served: ServedApp, tokens: dict[str, str]
) -> None:
    doc = {"source": "notes", "doc_id": "counts", "title": "t", "text": "Counting chunks."}
    with served.client(tokens["alpha"]) as client:
        first = client.post("/v1/documents", json={"documents": [doc]}, params=WAIT)
        assert first.status_code == 202, first.text
        (accepted,) = first.json()["accepted"]
        assert (accepted["source"], accepted["doc_id"]) == ("notes", "counts")
        # the docs partition is the one the document's key hashes to (ragindex.topics)
        from ragindex.config import RagIndexSpec
        from ragindex.records import doc_key
        from ragindex.topics import partition_for_key

        key = doc_key("alpha", "notes", "counts")
        assert accepted["partition"] == partition_for_key(key, RagIndexSpec().log.docs_partitions)
        assert first.json()["applied"] is True
        hits = search(client, "counting chunks", k=100, mode="lexical")["hits"]
        assert [h["chunk_id"] for h in hits].count("notes:counts:0") == 1
        chunks = client.get("/v1/stats").json()["chunks"]
        again = client.post("/v1/documents", json={"documents": [doc]}, params=WAIT)
        assert again.json()["accepted"][0]["offset"] > accepted["offset"]
        assert client.get("/v1/stats").json()["chunks"] == chunks  # unchanged: no new chunk
        no_wait = client.post("/v1/documents", json={"documents": [doc]})
        assert no_wait.status_code == 202 and no_wait.json()["applied"] is None


def test_a_document_twice_in_one_upsert_is_written_in_order_last_wins(
    served: ServedApp, tokens: dict[str, str]
) -> None:
    first = {"source": "notes", "doc_id": "twice", "text": "Albatross wings glide far."}
    last = {**first, "text": "Penguin flippers swim fast."}
    with served.client(tokens["alpha"]) as client:
        r = client.post("/v1/documents", json={"documents": [first, last]}, params=WAIT)
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
        a, b = r.json()["accepted"]
        assert (a["partition"], a["offset"] + 1) == (b["partition"], b["offset"])  # in order
        for mode in ("dense", "lexical"):
            hits = search(client, "penguin flippers swim", k=100, mode=mode)["hits"]
            assert "notes:twice:0" in [h["chunk_id"] for h in hits], mode
        lexical = search(client, "albatross", k=100, mode="lexical")["hits"]
        assert all(h["doc_id"] != "twice" for h in lexical)


def test_search_returns_cited_hits_with_ranks_and_timings(
    loaded: ServedApp, tokens: dict[str, str]
) -> None:
    with loaded.client(tokens["alpha"]) as client:
        body = search(client, "tower with a lamp guiding ships", k=3)
    top = body["hits"][0]
    assert top["chunk_id"] == "wiki:lighthouse:0"
    assert (top["source"], top["doc_id"], top["title"]) == ("wiki", "lighthouse", "Lighthouses")
    assert "lighthouse" in top["text"]
    assert set(top["ranks"]) == {"dense", "lexical"}
    assert len(body["hits"]) <= 3
    assert {"embed", "dense", "lexical", "fusion", "fetch"} <= set(body["timings_ms"])
    for mode in ("dense", "lexical"):
        with loaded.client(tokens["alpha"]) as client:
            hits = search(client, "magma and lava", k=2, mode=mode)["hits"]
        assert hits[0]["doc_id"] == "volcano"
        assert set(hits[0]["ranks"]) == {mode}


def test_deleted_document_never_returns(served: ServedApp, tokens: dict[str, str]) -> None:
    doc = {
        "source": "tmp",
        "doc_id": "ephemeral",
        "title": "Ephemeral",
        "text": "Quokkas are small marsupials that live on Rottnest island near Perth.",
    }
    with served.client(tokens["alpha"]) as client:
        r = client.post("/v1/documents", json={"documents": [doc]}, params=WAIT)
        assert r.status_code == 202
        assert search(client, "quokka marsupial Rottnest")["hits"][0]["doc_id"] == "ephemeral"
        r = client.delete("/v1/documents/tmp/ephemeral", params=WAIT)
        assert r.status_code == 202, r.text
        assert r.json()["applied"] is True
        assert r.json()["accepted"][0]["doc_id"] == "ephemeral"
        for mode in ("hybrid", "dense", "lexical"):
            hits = search(client, "quokka marsupial Rottnest", k=100, mode=mode)["hits"]
            assert all(h["doc_id"] != "ephemeral" for h in hits), mode
        assert client.delete("/v1/documents/tmp/ephemeral", params=WAIT).status_code == 202


def test_no_cross_tenant_hit_even_for_exact_text(loaded: ServedApp, tokens: dict[str, str]) -> None:
    with loaded.client(tokens["alpha"]) as client:
        for mode in ("hybrid", "dense", "lexical"):
            hits = search(client, SECRET, k=100, mode=mode)["hits"]
            assert all(h["source"] != "vault" for h in hits), mode
    with loaded.client(tokens["beta"]) as client:
        hits = search(client, SECRET, k=100)["hits"]
    assert [h["chunk_id"] for h in hits] == ["vault:nightjar:0"]


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic abc"}],
    ids=["none", "unknown", "not-bearer"],
)
def test_missing_or_unknown_token_is_401(
    loaded: ServedApp, tokens: dict[str, str], headers: dict[str, str]
) -> None:
    with loaded.client() as client:
        for method, path, body in (
            ("POST", "/v1/search", {"query": "lighthouse"}),
            ("POST", "/v1/documents", {"documents": DOCS[:1]}),
            ("DELETE", "/v1/documents/wiki/lighthouse", None),
            ("GET", "/v1/stats", None),
        ):
            r = client.request(method, path, json=body, headers=headers)
            assert r.status_code == 401, (path, r.text)
            assert r.json()["detail"]
    with loaded.client(tokens["alpha"]) as client:
        hits = search(client, "lighthouse", k=100)["hits"]
    assert "wiki:lighthouse:0" in [h["chunk_id"] for h in hits]  # the refused delete did nothing


def test_token_minted_while_serving_works_at_once(loaded: ServedApp) -> None:
    token = create_token(loaded.data_dir, "gamma")
    with loaded.client(token) as client:
        assert search(client, "lighthouse")["hits"] == []  # gamma owns nothing yet
        assert client.get("/v1/stats").json()["chunks"] == 0


DOC = {"source": "s", "doc_id": "d", "text": "x"}
BAD_REQUESTS: list[tuple[str, str, Any, int, str]] = [
    ("POST", "/v1/search", b'{"query": "x", ', 400, "not valid JSON"),
    ("POST", "/v1/documents", b"\xff\xfe garbage", 400, "not valid JSON"),
    ("POST", "/v1/search", {"query": "x", "k": "5"}, 422, "k"),
    ("POST", "/v1/search", {"query": "x", "k": 0}, 422, "k"),
    ("POST", "/v1/search", {"query": "x", "k": 101}, 422, "k"),
    ("POST", "/v1/search", {"query": "x", "k": 2.5}, 422, "k"),
    ("POST", "/v1/search", {"query": 7}, 422, "query"),
    ("POST", "/v1/search", {"query": "x" * 4097}, 422, "query"),
    ("POST", "/v1/search", {"query": ""}, 422, "query"),
    ("POST", "/v1/search", {"query": "x", "mode": "fuzzy"}, 422, "mode"),
    ("POST", "/v1/search", {"query": "x", "rerank": "yes"}, 422, "rerank"),
    ("POST", "/v1/search", {"query": "x", "tenant_id": "beta"}, 422, "tenant_id"),
    ("POST", "/v1/search", [1, 2], 422, "body"),
    ("POST", "/v1/documents", {"documents": "nope"}, 422, "documents"),
    ("POST", "/v1/documents", {"documents": []}, 422, "documents"),
    ("POST", "/v1/documents", {"documents": [{"source": "s", "doc_id": "d"}]}, 422, "text"),
    (
        "POST",
        "/v1/documents",
        {"documents": [{"source": "s", "doc_id": "d", "title": "t", "text": 5}]},
        422,
        "text",
    ),
    (
        "POST",
        "/v1/documents",
        {"documents": [{"source": "a/b", "doc_id": "d", "title": "t", "text": "x"}]},
        422,
        "source",
    ),
    (
        "POST",
        "/v1/documents",
        {"documents": [{"source": "s", "doc_id": "d", "title": "t", "text": "   "}]},
        422,
        "text",
    ),
    (
        "POST",
        "/v1/documents",
        {"documents": [{"source": "s", "doc_id": "d", "text": "x", "updated": "yesterday"}]},
        422,
        "RFC 3339",
    ),
    (
        "POST",
        "/v1/documents",
        {"documents": [{"source": "s", "doc_id": f"d{i}", "text": "x"} for i in range(257)]},
        422,
        "documents",
    ),
    (
        "POST",
        "/v1/documents",
        {"documents": [{"source": "s", "doc_id": "big", "text": "x" * (MAX_DOCUMENT_CHARS + 1)}]},
        422,
        "text",
    ),
    # A document larger than one log record (its JSON in UTF-8) is refused by name, with its
    # batch: the file log took it, and Kafka then refused it forever with a retryable 503.
    (
        "POST",
        "/v1/documents",
        {"documents": [DOC, {"source": "s", "doc_id": "emoji", "text": "😀" * MAX_DOCUMENT_CHARS}]},
        413,
        "s:emoji",
    ),
    # Issue #14: oversize fields, nested metadata, trailing newlines and lone surrogates.
    ("POST", "/v1/documents", {"documents": [DOC | {"title": "t" * 513}]}, 422, "title"),
    ("POST", "/v1/documents", {"documents": [DOC | {"metadata": {"a": {"b": 1}}}]}, 422, "meta"),
    ("POST", "/v1/documents", {"documents": [DOC | {"metadata": {"a": "m" * 300}}]}, 422, "meta"),
    ("POST", "/v1/documents", {"documents": [DOC | {"doc_id": "d\n"}]}, 422, "doc_id"),
    (
        "POST",
        "/v1/documents",
        b'{"documents": [{"source": "s", "doc_id": "d", "text": "a\\ud800"}]}',
        422,
        "unicode",
    ),
    ("POST", "/v1/search", b'{"query": "lift \\udc00"}', 422, "unicode"),
    ("POST", "/v1/answer", {"question": " \t "}, 422, "question"),
    ("POST", "/v1/answer", {"question": "lift", "k": "5"}, 422, "k"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "mentions"), BAD_REQUESTS)
def test_bad_input_is_4xx_with_a_message_and_changes_nothing(
    loaded: ServedApp,
    tokens: dict[str, str],
    method: str,
    path: str,
    body: Any,
    status: int,
    mentions: str,
) -> None:
    assert MAX_BATCH_DOCUMENTS == 256
    with loaded.client(tokens["alpha"]) as client:
        before = client.get("/v1/stats").json()["chunks"]
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        r = client.request(
            method, path, content=content, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == status, r.text
        assert mentions in r.json()["detail"]
        assert client.get("/v1/stats").json()["chunks"] == before


def test_oversize_body_is_413(loaded: ServedApp, tokens: dict[str, str]) -> None:
    big = b'{"query": "' + b"x" * (MAX_BODY_BYTES + 10) + b'"}'
    with loaded.client(tokens["alpha"]) as client:
        r = client.post("/v1/search", content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413
        assert "limit" in r.json()["detail"]

        def chunks() -> Any:  # no Content-Length: the streamed body is counted instead
            for _ in range(17):
                yield b"x" * (1024 * 1024)

        r = client.post("/v1/search", content=chunks())
        assert r.status_code == 413


def test_ops_endpoints(loaded: ServedApp, tokens: dict[str, str]) -> None:
    with loaded.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        openapi = client.get("/openapi.json").json()
        assert {
            "/v1/documents",
            "/v1/documents/{source}/{doc_id}",
            "/v1/search",
            "/v1/stats",
            "/healthz",
            "/readyz",
            "/metrics",
        } <= set(openapi["paths"])
        assert "delete" in openapi["paths"]["/v1/documents/{source}/{doc_id}"]
    with loaded.client(tokens["alpha"]) as client:
        stats = client.get("/v1/stats").json()
        assert stats["tenant"] == "alpha"
        assert stats["chunks"] >= len(DOCS)
        assert stats["dense_vectors"] == stats["chunks"] == stats["lexical_docs"]
        assert stats["shards"] == 2
        # Tenant-scoped (issue #14): no log offsets, which count every tenant's writes.
        assert "wal_offsets" not in stats
        assert set(stats) <= set(openapi["components"]["schemas"]["StatsResponse"]["properties"])
        search(client, "bread")
    with loaded.client() as client:
        # Making it reads the whole corpus: never for an anonymous caller.
        assert client.get("/v1/generation").status_code == 401
        metrics = client.get("/metrics")
    with loaded.client(tokens["beta"]) as client:
        # The build report the operator promotes on: caught up, every check passed, and
        # nothing in it names a tenant or a document.
        report = client.get("/v1/generation")
        assert report.status_code == 200, report.text
        body = report.json()
        assert body["consumed"] == body["end"] > 0
        assert body["checks"] == {"caught-up": "", "chunk-counts": "", "self-check": ""}
        assert "alpha" not in report.text and "lighthouse" not in report.text
    assert metrics.status_code == 200
    assert 'ragindex_http_requests_total{route="/v1/search",status="200"}' in metrics.text
    assert "ragindex_http_request_seconds_bucket" in metrics.text


def test_metrics_show_every_process_of_the_embedded_runtime(
    loaded: ServedApp, tokens: dict[str, str]
) -> None:
    """One /metrics for the Router, Ingest and the views: the stages of a search, what Ingest
    consumed and appended (another process), the views' offsets and staleness."""
    from prometheus_client.parser import text_string_to_metric_families

    with loaded.client(tokens["alpha"]) as client:
        search(client, "lighthouse tower", mode="hybrid")
    with loaded.client() as client:
        metrics = client.get("/metrics")
    assert metrics.status_code == 200
    values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(metrics.text)  # valid exposition
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return values.get((name, frozenset(labels.items())), 0.0)

    for stage in ("embed", "dense", "lexical", "fusion", "fetch"):
        assert value("ragindex_query_stage_seconds_count", stage=stage) >= 1, stage
    assert value("ragindex_search_hits_count", mode="hybrid") >= 1
    # Ingest's process: the documents it consumed and the appends it made
    assert value("ragindex_ingest_documents_total") >= len(DOCS) + 1
    assert value("ragindex_ingest_chunks_embedded_total") >= len(DOCS) + 1
    assert value("ragindex_log_append_seconds_count", topic="docs") >= 2
    assert value("ragindex_processes", role="router") >= 1
    assert value("ragindex_processes", role="ingest") == 1
    assert value("ragindex_process_resident_memory_bytes", role="ingest") > 0
    # the Router's views: every chunk applied, on both legs, none stale
    for view in ("dense", "lexical"):
        applied = sum(value("ragindex_view_applied_offset", view=view, partition=p) for p in "01")
        assert applied >= len(DOCS) + 1, view
    assert values.keys() >= {
        ("ragindex_view_freshness_seconds", frozenset({("view", "dense"), ("partition", "0")})),
        ("ragindex_ingest_consumer_lag_records", frozenset({("partition", "0")})),
    }
    # no tenant is ever a label
    assert "alpha" not in metrics.text and "beta" not in metrics.text


def test_writes_are_visible_within_the_freshness_bound(
    served: ServedApp, tokens: dict[str, str]
) -> None:
    doc = {"source": "fresh", "doc_id": "d1", "title": "", "text": "Axolotls regrow limbs."}
    with served.client(tokens["alpha"]) as client:
        start = time.monotonic()
        assert client.post("/v1/documents", json={"documents": [doc]}).status_code == 202
        while not search(client, "axolotl regrow", mode="lexical")["hits"]:
            assert time.monotonic() - start < 2.0
            time.sleep(0.05)


def test_answer_cites_the_tenants_sources_or_refuses(
    loaded: ServedApp, tokens: dict[str, str]
) -> None:
    with loaded.client(tokens["alpha"]) as client:
        r = client.post(
            "/v1/answer", json={"question": "What guides ships along dangerous coasts?"}
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert not body["refused"], body
        assert body["citations"] and all(
            c.startswith("wiki:lighthouse:") for c in body["citations"]
        )
        assert "[1]" in body["answer"]
        off_topic = client.post(
            "/v1/answer", json={"question": "Who won the 1998 football world cup final?"}
        )
        assert off_topic.status_code == 200 and off_topic.json()["refused"] is True
        assert client.post("/v1/answer", json={"question": ""}).status_code == 422
    with loaded.client(tokens["beta"]) as client:
        other = client.post("/v1/answer", json={"question": "What guides ships along coasts?"})
        assert other.status_code == 200
        assert not any(c.startswith("wiki:lighthouse:") for c in other.json()["citations"])


SALARY_DOCS = [
    {
        "source": "hr",
        "doc_id": "bands",
        "title": "Salary bands",
        "text": "Quarterly salary bands of every engineer, with the exact salary of each.",
        "metadata": {"year": 2023},
        "acl": ["group:ops"],
    },
    {
        "source": "hr",
        "doc_id": "review",
        "title": "Salary review",
        "text": "How the yearly salary review works and who takes part in it.",
        "updated": "2024-03-01",
        "metadata": {"year": 2024, "lang": "en"},
        "acl": ["group:eng", "group:ops"],
    },
    {
        "source": "wiki",
        "doc_id": "salary-faq",
        "title": "Salary FAQ",
        "text": "Frequently asked questions about salary payment dates.",
        "updated": "2023-01-01",
        "metadata": {"year": 2022},
    },
]
SALARY_IDS = {f"{d['source']}:{d['doc_id']}" for d in SALARY_DOCS}


def salary_hits(client: Any, **kw: Any) -> dict[str, set[str]]:
    """The salary documents each mode returns (all of them fit in k=100)."""
    out = {}
    for mode in ("hybrid", "dense", "lexical"):
        r = client.post("/v1/search", json={"query": "salary", "k": 100, "mode": mode, **kw})
        assert r.status_code == 200, r.text
        found = {f"{h['source']}:{h['doc_id']}" for h in r.json()["hits"]}
        out[mode] = found & SALARY_IDS
    return out


def test_acls_and_filters_inside_every_leg_over_http(
    loaded: ServedApp, tokens: dict[str, str]
) -> None:
    eng = create_token(loaded.data_dir, "alpha", ["user:ann", "group:eng"])
    ops = create_token(loaded.data_dir, "alpha", ["group:ops"])
    with loaded.client(eng) as client:
        r = client.post("/v1/documents", json={"documents": SALARY_DOCS}, params=WAIT)
        assert r.status_code == 202 and r.json()["applied"] is True, r.text

    def each_mode(found: dict[str, set[str]], expected: set[str]) -> None:
        assert found == dict.fromkeys(("hybrid", "dense", "lexical"), expected)

    with loaded.client(ops) as client:
        each_mode(salary_hits(client), SALARY_IDS)
        each_mode(
            salary_hits(client, filter={"field": "metadata.year", "gte": 2023}),
            {"hr:bands", "hr:review"},
        )
        either = {
            "or": [{"field": "source", "eq": "wiki"}, {"field": "updated", "gte": "2024-01-01"}]
        }
        each_mode(salary_hits(client, filter=either), {"wiki:salary-faq", "hr:review"})
        english = {"field": "metadata.lang", "eq": "en"}
        both = {"and": [{"field": "source", "in": ["hr"]}, english]}
        each_mode(salary_hits(client, filter=both), {"hr:review"})
    with loaded.client(eng) as client:
        each_mode(salary_hits(client), {"hr:review", "wiki:salary-faq"})
        each_mode(salary_hits(client, principals=["user:ann"]), {"wiki:salary-faq"})  # narrowed
        widen = client.post("/v1/search", json={"query": "salary", "principals": ["group:ops"]})
        assert widen.status_code == 403 and "group:ops" in widen.json()["detail"]
        asked = client.post(
            "/v1/answer", json={"question": "What are the salary bands?", "principals": ["x"]}
        )
        assert asked.status_code == 422  # not a principal at all
        answer = client.post(
            "/v1/answer", json={"question": "What are the quarterly salary bands?"}
        )
        assert answer.status_code == 200, answer.text
        shown = {c for s in answer.json()["sources"] for c in s["chunk_ids"]}
        assert not any(c.startswith("hr:bands:") for c in shown | set(answer.json()["citations"]))
        bad = client.post(
            "/v1/search", json={"query": "salary", "filter": {"field": "colour", "eq": 1}}
        )
        assert bad.status_code == 422 and "field" in bad.json()["detail"]
        empty = {"field": "metadata.year", "gte": 5, "lt": 1}  # an empty range: no hits
        nothing = client.post("/v1/search", json={"query": "salary", "filter": empty})
        assert nothing.status_code == 200 and nothing.json()["hits"] == []
        no_operator = client.post(
            "/v1/search", json={"query": "salary", "filter": {"field": "source"}}
        )
        assert no_operator.status_code == 422 and "condition" in no_operator.json()["detail"]
    with loaded.client(tokens["alpha"]) as client:  # no principals: documents without an ACL
        each_mode(salary_hits(client), {"wiki:salary-faq"})
    with loaded.client() as client:
        spec = client.get("/openapi.json").json()
    search_op = spec["paths"]["/v1/search"]["post"]
    assert (
        "403" in search_op["responses"]
        and "403" in spec["paths"]["/v1/answer"]["post"]["responses"]
    )
    schemas = spec["components"]["schemas"]
    assert {"filter", "principals"} <= set(schemas["SearchRequest"]["properties"])
    assert "acl" in schemas["DocumentIn"]["properties"]
    assert schemas["MetadataRange"]["properties"]["field"]["pattern"]


def test_replicas_run_at_the_priority_of_the_process_that_started_ray(served: ServedApp) -> None:
    """Ray's default would start them at niceness 15, behind every other process on the box."""
    import psutil

    def is_replica(proc: psutil.Process) -> bool:
        try:
            return proc.cmdline()[:1] != [] and "ServeReplica" in proc.cmdline()[0]
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            return False

    me = psutil.Process()
    replicas = [p for p in me.children(recursive=True) if is_replica(p)]
    assert replicas, "no Serve replica among this process's children"
    assert {p.nice() for p in replicas} == {me.nice()}


def test_the_cli_posts_a_folder_to_a_running_server(
    served: ServedApp, tokens: dict[str, str], tmp_path: Path
) -> None:
    """`ragindex ingest DIR --url URL` (its own process, token from the environment): every
    document acknowledged and searchable for the token's tenant; run again with --skip it
    resumes after the documents already sent; a refused token stops with one line, exit 2."""
    folder = tmp_path / "manuals"
    folder.mkdir()
    (folder / "kiln.md").write_text(
        "---\ntitle: Kiln manual\nteam: ceramics\n---\n# Firing\n\nA kiln fires clay pots at"
        " twelve hundred degrees for a glaze that rings like a bell.\n"
    )
    (folder / "loom.txt").write_text("A loom weaves weft threads through the warp.\n")
    cli = [sys.executable, "-m", "ragindex.app.cli", "ingest", str(folder), "--url", served.url]
    env = {**os.environ, "RAGINDEX_TOKEN": tokens["alpha"]}
    ran = subprocess.run([*cli, "--wait"], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert "2 documents acknowledged" in ran.stdout
    with served.client(tokens["alpha"]) as client:
        hit = search(client, "kiln glaze firing clay", k=1, mode="lexical")["hits"][0]
        assert (hit["source"], hit["doc_id"], hit["title"]) == ("manuals", "kiln.md", "Kiln manual")
    with served.client(tokens["beta"]) as client:
        assert search(client, "kiln glaze firing clay", mode="lexical")["hits"] == []
    resumed = subprocess.run([*cli, "--skip", "1"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0 and "1 documents acknowledged" in resumed.stdout
    refused = subprocess.run(
        [*cli, "--token", "not-a-token"], env=env, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2, refused.stderr
    (line,) = [x for x in refused.stderr.splitlines() if x.startswith("ragindex:")]
    assert "HTTP 401" in line and "stopped at document 1 of 2" in line


def test_errors_are_problem_details_with_a_stable_type(
    served: ServedApp, tokens: dict[str, str]
) -> None:
    def problem_of(r: Any, code: str, status: int) -> dict[str, Any]:
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/problem+json"
        body = r.json()
        assert body["type"] == f"urn:ragindex:problem:{code}" and body["code"] == code
        assert body["status"] == status and body["title"] and body["detail"]
        return body

    with served.client(tokens["alpha"]) as client:
        body = problem_of(client.post("/v1/search", json={"query": ""}), "invalid-request", 422)
        assert body["detail"].startswith("invalid request: query:")
        bad_json = client.post(
            "/v1/search", content=b"{nope", headers={"content-type": "application/json"}
        )
        problem_of(bad_json, "invalid-json", 400)
        problem_of(client.get("/v1/no-such-thing"), "not-found", 404)
        problem_of(client.get("/v1/search"), "method-not-allowed", 405)
        principals = {"query": "x", "principals": ["user:mallory"]}
        problem_of(client.post("/v1/search", json=principals), "forbidden", 403)
    with served.client("not-a-token") as client:
        r = client.post("/v1/search", json={"query": "lamp"})
        problem_of(r, "unauthorized", 401)
        assert r.headers["www-authenticate"] == "Bearer"


def test_documents_read_back_listed_and_deleted_by_filter_over_http(served: ServedApp) -> None:
    """A tenant of its own, over the same DOCS and SALARY_DOCS: a document as indexed (404
    alike when absent, unreadable or another tenant's), the paged listing, and a bounded
    delete by filter that refuses past its bound and changes nothing."""
    gamma = create_token(served.data_dir, "gamma")
    ops = create_token(served.data_dir, "gamma", ["group:ops"])
    eng = create_token(served.data_dir, "gamma", ["group:eng"])
    delta = create_token(served.data_dir, "delta", ["group:ops"])
    with served.client(gamma) as client:
        r = client.post("/v1/documents", json={"documents": DOCS + SALARY_DOCS}, params=WAIT)
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
        bread = client.get("/v1/documents/wiki/bread")
        assert bread.status_code == 200, bread.text
        doc = bread.json()
        assert (doc["title"], doc["metadata"]["lang"], doc["acl"]) == ("Bread", "en", None)
        assert doc["updated"].startswith("2024-05-01")
        chunks = doc["chunks"]
        assert [c["n"] for c in chunks] == list(range(len(chunks))) and chunks
        assert [c["chunk_id"] for c in chunks] == [f"wiki:bread:{n}" for n in range(len(chunks))]
        assert all(re.fullmatch("[0-9a-f]{32}", c["content_hash"]) for c in chunks)
        assert "flour" in " ".join(c["text"] for c in chunks)
        absent = client.get("/v1/documents/wiki/no-such-doc")
        unreadable = client.get("/v1/documents/hr/bands")  # ACL group:ops
    with served.client(delta) as client:
        foreign = client.get("/v1/documents/wiki/bread")
        assert client.get("/v1/documents").json()["documents"] == []
    for r in (absent, unreadable, foreign):
        assert r.status_code == 404 and r.json()["code"] == "not-found", r.text
        assert r.headers["content-type"] == "application/problem+json"
    with served.client(eng) as client:
        assert client.get("/v1/documents/hr/bands").status_code == 404
        review = client.get("/v1/documents/hr/review").json()
        assert review["acl"] == ["group:eng"]  # not the ACL's other principal

    everything = sorted((d["source"], d["doc_id"]) for d in DOCS + SALARY_DOCS)
    with served.client(ops) as client:
        listed: list[tuple[str, str]] = []
        cursor = None
        pages = 0
        while True:
            params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            r = client.get("/v1/documents", params=params)
            assert r.status_code == 200, r.text
            listed += [(d["source"], d["doc_id"]) for d in r.json()["documents"]]
            pages += 1
            cursor = r.json()["next_cursor"]
            if cursor is None:
                break
        assert listed == everything and pages == 3
        bad = client.get("/v1/documents", params={"cursor": "not-a-cursor"})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid-input", bad.text
        hr = {"field": "source", "eq": "hr"}
        over = client.post("/v1/documents/delete", json={"filter": hr, "max_documents": 1})
        assert over.status_code == 409 and over.json()["code"] == "too-many-matches", over.text
        assert "matches 2 documents" in over.json()["detail"]
        time.sleep(1.0)  # past the views' refresh: nothing was deleted
        assert client.get("/v1/documents/hr/bands").status_code == 200
        done = client.post(
            "/v1/documents/delete", json={"filter": hr, "max_documents": 2}, params=WAIT
        )
        assert done.status_code == 202, done.text
        assert [a["doc_id"] for a in done.json()["accepted"]] == ["bands", "review"]
        assert done.json()["applied"] is True
        assert client.get("/v1/documents/hr/bands").status_code == 404
        left = [(d["source"], d["doc_id"]) for d in client.get("/v1/documents").json()["documents"]]
        assert left == [k for k in everything if k[0] != "hr"]
        found = search(client, "salary", k=100)["hits"]
        assert found and not any(h["source"] == "hr" for h in found)
    with served.client(gamma) as client:  # no principals: documents without an ACL only
        listed_public = [d["doc_id"] for d in client.get("/v1/documents").json()["documents"]]
        assert listed_public == ["bread", "lighthouse", "salary-faq", "volcano"]


def test_search_pages_by_cursor_in_one_order_and_refuses_other_cursors(
    served: ServedApp,
) -> None:
    token = create_token(served.data_dir, "epsilon")
    query = {"query": "a tower, a volcano, bread or salary", "mode": "hybrid"}
    with served.client(token) as client:
        r = client.post("/v1/documents", json={"documents": DOCS + SALARY_DOCS}, params=WAIT)
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
        whole = search(client, **query, k=100)
        assert whole["next_cursor"] is None  # fewer hits than k: the results end here
        expected = [(h["score"], h["chunk_id"]) for h in whole["hits"]]
        assert expected == sorted(expected, key=lambda h: (-h[0], h[1])) and len(expected) >= 4
        paged: list[tuple[float, str]] = []
        body = search(client, **query, k=1)
        while True:
            paged += [(h["score"], h["chunk_id"]) for h in body["hits"]]
            if body["next_cursor"] is None:
                break
            body = search(client, **query, k=1, cursor=body["next_cursor"])
        assert paged == expected

        first = search(client, **query, k=2)
        pattern = client.get("/openapi.json").json()["components"]["schemas"]["SearchRequest"]
        assert re.match(
            pattern["properties"]["cursor"]["anyOf"][0]["pattern"], first["next_cursor"]
        )
        # a write between two pages: the next page is the ranking as it is now, less the hits
        # the first page returned (none comes back, none still in the results is left out)
        news = {
            "source": "wiki",
            "doc_id": "tower-news",
            "title": "Tower",
            "text": "A tower with a lamp near a volcano; bread and salary news.",
        }
        r = client.post("/v1/documents", json={"documents": [news]}, params=WAIT)
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
        rest = search(client, **query, k=100, cursor=first["next_cursor"])
        now = search(client, **query, k=100)["hits"]
        shown = {h["chunk_id"] for h in first["hits"]}
        assert rest["hits"] == [h for h in now if h["chunk_id"] not in shown]
        assert any(h["doc_id"] == "tower-news" for h in rest["hits"])

        generation = first["next_cursor"].split("/")[1]
        other = first["next_cursor"].replace(
            f"s2/{generation}/", "s2/ffffffff/" if generation != "ffffffff" else "s2/00000000/"
        )
        for bad in (other, "s2/zz", "x" * 10):
            r = client.post("/v1/search", json={**query, "cursor": bad})
            assert r.status_code == 400 and r.json()["code"] == "invalid-input", r.text
            assert "cursor" in r.json()["detail"]
