"""ragindex's logs: JSON lines (for a log pipeline) or text (for a terminal), one switch.

Every line of `json` is one object: `ts` (RFC 3339, UTC), `level`, `logger`, `message`, and
where known `replica` (the Serve replica, or the process's role), `request_id` (the HTTP
request's `X-Request-ID`, or one made for it) and `trace_id` (the OpenTelemetry span's, 32 hex
digits), then `exception` with the traceback. `text` is one readable line with the same
fields. The format comes from `--log-format` on the CLI, else `RAGINDEX_LOG_FORMAT`, else
`auto`: text when stderr is a terminal, JSON otherwise (a pod, a pipe, a file). Serve replicas
inherit the CLI's choice through the environment; the operator sets JSON on cluster pods.

The request id lives in a context variable that the HTTP middleware sets, so a line logged by
any code a request runs (on the event loop, or on a replica thread: `ReplicaThread` runs work
in a copy of the caller's context) carries it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ragindex.telemetry_names import LOG_FORMAT_ENV

LOG_FORMATS = ("auto", "json", "text")
_request_id: ContextVar[str | None] = ContextVar("ragindex_request_id", default=None)
_replica: list[str | None] = [None]  # this process's replica (or role), set once


def current_request_id() -> str | None:
    return _request_id.get()


@contextmanager
def request_id_scope(request_id: str | None) -> Iterator[None]:
    """Lines logged inside carry `request_id`."""
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        _request_id.reset(token)


def _trace_id() -> str | None:
    try:
        from opentelemetry import trace
    except ImportError:  # pragma: no cover - the API ships with Ray
        return None
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname,
        "logger": record.name,
        "message": record.getMessage(),
    }
    if _replica[0] is not None:
        fields["replica"] = _replica[0]
    request_id = _request_id.get()
    if request_id is not None:
        fields["request_id"] = request_id
    trace_id = _trace_id()
    if trace_id is not None:
        fields["trace_id"] = trace_id
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module's docstring for the fields)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record)
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            fields["exception"] = record.exc_text
        return json.dumps(fields, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`ts level logger [replica request_id trace_id] message`, for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record)
        where = " ".join(
            f"{k}={fields[k]}" for k in ("replica", "request_id", "trace_id") if k in fields
        )
        line = f"{fields['ts']} {fields['level']:<7} {fields['logger']}"
        line += f" [{where}] " if where else " "
        line += fields["message"]
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a line is logged (a test's capture, replaced
    between tests, or the process's own)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def resolve_format(choice: str | None = None) -> str:
    """`json` or `text`: the choice, else RAGINDEX_LOG_FORMAT, else by whether stderr is a
    terminal."""
    chosen = (choice or os.environ.get(LOG_FORMAT_ENV) or "auto").lower()
    if chosen not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {chosen!r}")
    if chosen == "auto":
        return "text" if sys.stderr.isatty() else "json"
    return chosen


def configure_logging(
    choice: str | None = None,
    *,
    level: int = logging.INFO,
    replica: str | None = None,
    logger: str = "",
) -> str:
    """Send `logger`'s records (the root's by default; a Serve replica: `ragindex`, leaving
    Ray's own logging alone) to stderr in the chosen format; returns the format. `replica`
    names this process in every line. Calling it again replaces the handler it installed."""
    fmt = resolve_format(choice)
    if replica is not None:
        _replica[0] = replica
    target = logging.getLogger(logger)
    for handler in list(target.handlers):
        if getattr(handler, "_ragindex", False):
            target.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler._ragindex = True  # type: ignore[attr-defined]
    target.addHandler(handler)
    target.setLevel(level)
    if logger:
        target.propagate = False  # once, in this format: not again through the root's handler
    return fmt
