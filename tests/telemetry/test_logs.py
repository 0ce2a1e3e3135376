"""Structured logs: one JSON object per line with level, logger, replica, request id and trace
id; text for a terminal; the request id set by the HTTP middleware reaches the lines its
request logs, on the event loop and on a replica thread."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider

from ragindex.app.serve.threads import ReplicaThread
from ragindex.router import TokenVerifier, create_app, create_token
from ragindex.telemetry.logs import (
    JsonFormatter,
    TextFormatter,
    configure_logging,
    current_request_id,
    request_id_scope,
    resolve_format,
)


@contextmanager
def captured(name: str, formatter: logging.Formatter) -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    target = logging.getLogger(name)
    target.addHandler(handler)
    target.setLevel(logging.INFO)
    try:
        yield out
    finally:
        target.removeHandler(handler)


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_json_line_carries_level_logger_request_and_trace() -> None:
    tracer = TracerProvider().get_tracer("test")
    with captured("ragindex.t1", JsonFormatter()) as out:
        log = logging.getLogger("ragindex.t1")
        log.info("plain %s", "line")
        with request_id_scope("req-42"), tracer.start_as_current_span("search") as span:
            log.warning("inside")
            trace_id = format(span.get_span_context().trace_id, "032x")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    plain, inside, failed = lines(out)
    assert plain["level"] == "INFO" and plain["logger"] == "ragindex.t1"
    assert plain["message"] == "plain line" and plain["ts"].endswith("Z")
    assert "request_id" not in plain and "trace_id" not in plain
    assert inside["request_id"] == "req-42" and inside["trace_id"] == trace_id
    assert inside["level"] == "WARNING"
    assert failed["level"] == "ERROR" and "ValueError: boom" in failed["exception"]


def test_text_is_one_readable_line() -> None:
    with captured("ragindex.t2", TextFormatter()) as out, request_id_scope("r1"):
        logging.getLogger("ragindex.t2").info("hello")
    (line,) = out.getvalue().splitlines()
    assert "INFO" in line and "ragindex.t2" in line and "request_id=r1" in line
    assert line.endswith("hello")


def test_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGINDEX_LOG_FORMAT", "text")
    assert resolve_format() == "text"
    assert resolve_format("json") == "json"  # the flag beats the environment
    monkeypatch.setenv("RAGINDEX_LOG_FORMAT", "yaml")
    with pytest.raises(ValueError, match="json, text"):
        resolve_format()
    monkeypatch.delenv("RAGINDEX_LOG_FORMAT")
    assert resolve_format("auto") == "json"  # pytest's stderr is no terminal


def test_configure_logging_replaces_its_own_handler_and_names_the_replica() -> None:
    target = logging.getLogger("ragindex.t3")
    try:
        configure_logging("json", replica="Router#abc", logger="ragindex.t3")
        configure_logging("json", replica="Router#abc", logger="ragindex.t3")
        ours = [h for h in target.handlers if getattr(h, "_ragindex", False)]
        assert len(ours) == 1 and isinstance(ours[0].formatter, JsonFormatter)
        assert target.propagate is False
        with captured("ragindex.t3", JsonFormatter()) as out:
            target.info("x")
        assert lines(out)[0]["replica"] == "Router#abc"
    finally:
        for h in list(target.handlers):
            target.removeHandler(h)
        target.propagate = True


class LoggingBackend:
    """Logs from the event loop and from a replica thread during /v1/stats."""

    def __init__(self) -> None:
        self.thread = ReplicaThread("t-logs")

    async def stats(self, tenant_id: str) -> dict[str, Any]:
        log = logging.getLogger("ragindex.t4")
        log.info("on the loop")
        await self.thread.run(lambda: log.info("on the thread %s", current_request_id()))
        return {
            "tenant": tenant_id,
            "chunks": 0,
            "documents": 0,
            "dense_vectors": 0,
            "lexical_docs": 0,
            "shards": 1,
            "freshness_bound_s": 2.0,
        }


@pytest.mark.anyio
async def test_the_request_id_reaches_every_line_its_request_logs(tmp_path: Path) -> None:
    token = create_token(tmp_path, "alpha")
    backend = LoggingBackend()
    app = create_app(backend, TokenVerifier(tmp_path))  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {token}", "X-Request-ID": "abc-123"}
    with captured("ragindex.t4", JsonFormatter()) as out:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.get("/v1/stats", headers=headers)
            assert r.status_code == 200, r.text
            # without the header one is made for the request
            r = await client.get("/v1/stats", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200
    backend.thread.close()
    first_loop, first_thread, second_loop, second_thread = lines(out)
    assert first_loop["request_id"] == first_thread["request_id"] == "abc-123"
    assert first_thread["message"] == "on the thread abc-123"
    made = second_loop["request_id"]
    assert made and made != "abc-123" and second_thread["request_id"] == made
    assert current_request_id() is None  # nothing leaks out of a request


def test_replica_thread_runs_in_a_copy_of_the_callers_context() -> None:
    thread = ReplicaThread("t-ctx")

    async def main() -> tuple[str | None, str | None]:
        with request_id_scope("one"):
            first = await thread.run(current_request_id)
        second = await thread.run(current_request_id)
        return first, second

    try:
        assert asyncio.run(main()) == ("one", None)
    finally:
        thread.close()
