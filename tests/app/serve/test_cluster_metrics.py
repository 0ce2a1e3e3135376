"""The CLUSTER layout's metrics and traces.

Metrics: every replica (Router, Shard<i>, Lexical, Ingest, IngestEmbedder) records its own,
and one process of the node serves them all on the pod's metrics port (RAGINDEX_METRICS_PORT,
as the operator sets it), as the Router's /metrics does: the views' offsets and staleness from
the Shard and Lexical replicas, the Router's hops to them.

Traces: with an exporter configured (here a span file, RAGINDEX_TRACE_FILE, in place of an
OTLP collector), a search that comes with a sampled `traceparent` is one trace from the Router
replica HAProxy sent it to (the pods' ingress) to every shard and the BM25 view.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragindex.netutil import free_port
from ragindex.router import create_token
from ragindex.telemetry.tracing import TRACE_FILE_ENV, tracing_environment
from ragindex.telemetry_names import METRICS_PORT_ENV

if TYPE_CHECKING:  # fixtures come from conftest.py; pytest's importlib mode cannot import it
    from conftest import ServedApp

pytestmark = [pytest.mark.serve, pytest.mark.slow]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """The pod's metrics port and a span file, in the environment before the `cluster` fixture
    starts Ray (its processes inherit it, as the operator's pods have it)."""
    port = free_port()
    spans = tmp_path_factory.mktemp("traces") / "spans.jsonl"
    added = {METRICS_PORT_ENV: str(port), TRACE_FILE_ENV: str(spans)}
    added.update(tracing_environment(added))
    os.environ.update(added)
    try:
        yield port, spans
    finally:
        for key in added:
            os.environ.pop(key, None)


@pytest.fixture(scope="module")
def metrics_port(environment: tuple[int, Path]) -> int:
    return environment[0]


@pytest.fixture(scope="module")
def observed(environment: tuple[int, Path], cluster: ServedApp) -> ServedApp:
    return cluster


def samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def test_every_replica_of_the_node_is_scraped_on_one_port(
    observed: ServedApp, metrics_port: int
) -> None:
    token = create_token(observed.data_dir, "alpha")
    doc = {"source": "wiki", "doc_id": "owl", "title": "Owls", "text": "Owls hunt at night."}
    with observed.client(token) as client:
        r = client.post(
            "/v1/documents",
            json={"documents": [doc]},
            params={"wait": "true", "wait_timeout_s": "60"},
        )
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
        r = client.post("/v1/search", json={"query": "owls at night", "mode": "hybrid"})
        assert r.status_code == 200 and r.json()["hits"], r.text

    def scrape() -> Samples:
        return samples(httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text)

    # the views record after each catch-up and Ingest after each batch; the port's server
    # is up once a replica bound it (within the housekeeping period)
    deadline = time.monotonic() + 60
    while True:
        try:
            found = scrape()
            if all(
                value(found, "ragindex_view_applied_offset", view=v, partition="0")
                + value(found, "ragindex_view_applied_offset", view=v, partition="1")
                >= 1
                for v in ("dense", "lexical")
            ):
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the views' offsets never showed on the port"
        time.sleep(0.5)
    # the write was consumed: no partition of `docs` lags, and the one written to shows its end
    lags = {k: v for k, v in found.items() if k[0] == "ragindex_ingest_consumer_lag_records"}
    assert lags and not any(lags.values()), lags
    ends = [v for k, v in found.items() if k[0] == "ragindex_log_end_offset"]
    assert sum(ends) >= 1
    for role in ("router", "shard", "lexical", "ingest", "embedder"):
        assert value(found, "ragindex_processes", role=role) >= 1, role
    assert value(found, "ragindex_processes", role="shard") == 2  # one replica of each shard
    # the Router's hops to each shard and to the BM25 view, and its stages
    for hop in ("dense.shard0", "dense.shard1", "lexical"):
        assert value(found, "ragindex_query_hop_seconds_count", hop=hop, part="round_trip") >= 1
    assert value(found, "ragindex_query_stage_seconds_count", stage="embed") >= 1
    assert value(found, "ragindex_ingest_documents_total") >= 1
    assert value(found, "ragindex_log_append_seconds_count", topic="docs") >= 1
    # a view that keeps up is fresh
    for view in ("dense", "lexical"):
        assert value(found, "ragindex_view_freshness_seconds", view=view, partition="0") < 30
    # the Router's /metrics (behind HAProxy) reads the same node
    with observed.client() as client:
        via_router = samples(client.get("/metrics").text)
    assert value(via_router, "ragindex_processes", role="shard") == 2


def test_a_search_with_a_traceparent_is_one_trace_through_every_shard(
    observed: ServedApp, environment: tuple[int, Path]
) -> None:
    _, spans_file = environment
    token = create_token(observed.data_dir, "alpha")
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    with observed.client(token) as client:
        r = client.post(
            "/v1/search",
            json={"query": "lighthouse at night", "mode": "hybrid"},
            headers={"traceparent": f"00-{trace_id}-{parent}-01"},
        )
        assert r.status_code == 200, r.text

    def spans() -> list[dict[str, Any]]:
        if not spans_file.exists():
            return []
        found = []
        for line in spans_file.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line being written
                span = json.loads(line)
                if span["context"]["trace_id"] == f"0x{trace_id}":
                    found.append(span)
        return found

    def parents_missing(traced: list[dict[str, Any]]) -> list[str]:
        """Spans whose parent is not in the trace (yet: a parent is written when it ends)."""
        ids = {s["context"]["span_id"] for s in traced} | {f"0x{parent}"}
        return [s["name"] for s in traced if s["parent_id"] not in ids]

    wanted = {"Router", "Shard0", "Shard1", "Lexical"}
    deadline = time.monotonic() + 30
    while True:
        traced = spans()
        deployments = {s["attributes"].get("deployment") for s in traced}
        if deployments >= wanted and not parents_missing(traced):
            break
        assert time.monotonic() < deadline, (
            f"spans of {deployments}, not all of {wanted}; parents missing:"
            f" {parents_missing(traced)}"
        )
        time.sleep(0.5)
    # the Router's span is the child of the caller's, and its span of the search endpoint
    # carries the search
    assert any(s["parent_id"] == f"0x{parent}" for s in traced)
    annotated = [s for s in traced if "ragindex.mode" in s["attributes"]]
    assert len(annotated) == 1, [(s["name"], sorted(s["attributes"])) for s in traced]
    (router,) = annotated
    assert router["attributes"]["ragindex.mode"] == "hybrid", router["name"]
    assert router["attributes"]["ragindex.stage.embed_ms"] > 0
