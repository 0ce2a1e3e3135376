"""Traces: OpenTelemetry spans of a request through the Serve proxy, the Router and every
replica it calls (each shard, the BM25 view, the embedder and reranker pools).

Ray Serve makes the spans and carries the W3C trace context itself: its proxy honours an
incoming `traceparent`, and every handle call carries the caller's context to the replica,
which starts its span under it. Serve turns this on in a process whose environment names an
exporter function (RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH) and samples by
RAY_SERVE_TRACING_SAMPLING_RATIO (parent-based: a sampled `traceparent` is always kept).
`tracing_environment()` says what to set when ragindex should trace: when an OTLP endpoint is
configured (the standard OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT),
or a span file is named (RAGINDEX_TRACE_FILE: JSON lines, for a look without a collector).
Otherwise nothing is set and tracing stays off: no span is made and nothing is exported.

ragindex's own code adds to the spans Serve makes: the Router's span of a search carries its
mode, hits and stage timings (`annotate_search`), each stage of the search (embed, dense,
lexical, fusion, fetch, rerank) is a child span of it (`stage_span`), so that a trace shows
where the time went in the embedded layout too, where the stages run in the Router's process,
and every log line logged under a span carries its trace id (ragindex.telemetry.logs). The
search thread and the BM25 leg run in copies of the request's context, so the calls they make
(a remote shard's, the BM25 view's) are in its trace, under their stage's span.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace

from ragindex.telemetry_names import (
    OTLP_ENDPOINT_ENV,
    SERVE_TRACING_EXPORTER_ENV,
    TRACING_EXPORTER,
)

OTLP_ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", OTLP_ENDPOINT_ENV)
TRACE_FILE_ENV = "RAGINDEX_TRACE_FILE"
STAGE_SPAN_PREFIX = "search."


def otlp_endpoint(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    return next((env[k] for k in OTLP_ENDPOINT_ENVS if env.get(k)), None)


def tracing_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What Ray's processes need in their environment for ragindex's traces: the exporter
    function, when an OTLP endpoint or a span file is configured (an exporter already named is
    left alone); empty otherwise (tracing off)."""
    env = os.environ if environ is None else environ
    if env.get(SERVE_TRACING_EXPORTER_ENV) or not (otlp_endpoint(env) or env.get(TRACE_FILE_ENV)):
        return {}
    return {SERVE_TRACING_EXPORTER_ENV: TRACING_EXPORTER}


def span_processors() -> list[Any]:
    """Serve's exporter function (no arguments, a list of span processors): OTLP over HTTP to
    the configured endpoint (batched, off the request path), and/or JSON lines to
    RAGINDEX_TRACE_FILE."""
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    processors: list[Any] = []
    if otlp_endpoint() is not None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processors.append(BatchSpanProcessor(OTLPSpanExporter()))
    path = os.environ.get(TRACE_FILE_ENV)
    if path:
        out = open(path, "a", encoding="utf-8")  # noqa: SIM115 (held for the process's life)
        exporter = ConsoleSpanExporter(
            out=out, formatter=lambda span: span.to_json(indent=None) + "\n"
        )
        processors.append(SimpleSpanProcessor(exporter))
    return processors


def annotate_search(mode: str, timings_ms: Mapping[str, float], hits: int, degraded: bool) -> None:
    """The current span (the Router's, of the HTTP request) gets the search's mode, hits and
    stage timings; nothing when no span records (tracing off, or the request not sampled)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    attributes: dict[str, Any] = {
        "ragindex.mode": mode,
        "ragindex.hits": hits,
        "ragindex.degraded": degraded,
    }
    for stage, ms in timings_ms.items():
        attributes[f"ragindex.stage.{stage}_ms"] = ms
    span.set_attributes(attributes)


@contextmanager
def stage_span(stage: str) -> Iterator[None]:
    """A child span of the current one (`search.<stage>`) for the length of the block; nothing
    when no span records (tracing off, or the request not sampled), so an untraced search pays
    one context look-up."""
    if not trace.get_current_span().is_recording():
        yield
        return
    with trace.get_tracer("ragindex").start_as_current_span(STAGE_SPAN_PREFIX + stage):
        yield
