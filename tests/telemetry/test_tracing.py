"""Tracing's switch and what ragindex adds to a span (the SDK's in-memory exporter); the trace
of one search across the cluster's replicas is tests/app/serve/test_cluster_metrics.py's."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragindex.router import SearchResult, TokenVerifier, create_app, create_token
from ragindex.telemetry.tracing import annotate_search, span_processors, tracing_environment
from ragindex.telemetry_names import SERVE_TRACING_EXPORTER_ENV, TRACING_EXPORTER


def test_tracing_is_on_only_with_an_endpoint_or_a_span_file() -> None:
    assert tracing_environment({}) == {}
    on = {SERVE_TRACING_EXPORTER_ENV: TRACING_EXPORTER}
    assert tracing_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == on
    assert tracing_environment({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318"}) == on
    assert tracing_environment({"RAGINDEX_TRACE_FILE": "/tmp/x"}) == on
    # an exporter someone named already is theirs
    mine = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", SERVE_TRACING_EXPORTER_ENV: "a:b"}
    assert tracing_environment(mine) == {}


def test_the_exporter_function_gives_what_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("RAGINDEX_TRACE_FILE", raising=False)
    assert span_processors() == []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    (otlp,) = span_processors()
    assert type(otlp.span_exporter).__name__ == "OTLPSpanExporter"  # type: ignore[attr-defined]
    otlp.shutdown()
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    spans = tmp_path / "spans.jsonl"
    monkeypatch.setenv("RAGINDEX_TRACE_FILE", str(spans))
    (to_file,) = span_processors()
    provider = TracerProvider()
    provider.add_span_processor(to_file)
    with provider.get_tracer("t").start_as_current_span("one"):
        pass
    provider.shutdown()
    (line,) = spans.read_text().splitlines()
    assert json.loads(line)["name"] == "one"


def test_annotate_search_only_touches_a_recording_span() -> None:
    annotate_search("hybrid", {"embed": 1.0}, 3, False)  # no span: nothing, no error
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("request"):
        annotate_search("dense", {"embed": 4.5, "dense": 0.7}, 2, True)
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert dict(span.attributes) == {
        "ragindex.mode": "dense",
        "ragindex.hits": 2,
        "ragindex.degraded": True,
        "ragindex.stage.embed_ms": 4.5,
        "ragindex.stage.dense_ms": 0.7,
    }


class OneHit:
    async def search(self, *args: object, **kwargs: object) -> SearchResult:
        return SearchResult(hits=[], timings_ms={"embed": 2.0, "lexical": 1.0})


@pytest.mark.anyio
async def test_the_http_search_annotates_the_request_span(tmp_path: Path) -> None:
    token = create_token(tmp_path, "alpha")
    app = create_app(OneHit(), TokenVerifier(tmp_path))  # type: ignore[arg-type]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        with provider.get_tracer("t").start_as_current_span("replica_handle_request Router"):
            r = await client.post(
                "/v1/search",
                json={"query": "q", "mode": "lexical"},
                headers={"Authorization": f"Bearer {token}"},
            )
    assert r.status_code == 200, r.text
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["ragindex.mode"] == "lexical"
    assert span.attributes["ragindex.stage.embed_ms"] == 2.0
