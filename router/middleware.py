"""The HTTP API's ASGI middleware: request metrics with the replica's Server-Timing, and the
body size limit (declared or streamed)."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi.responses import JSONResponse

from ragindex.router.problems import MEDIA_TYPE as PROBLEM_MEDIA_TYPE
from ragindex.router.problems import problem
from ragindex.telemetry import observe_http, request_id_scope

Scope = MutableMapping[str, Any]


Message = MutableMapping[str, Any]


Receive = Callable[[], Awaitable[Message]]


Send = Callable[[Message], Awaitable[None]]


ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def body_too_large(content_length: str | None, limit: int) -> bool:
    """Whether a declared Content-Length is over the limit (malformed counts as too large)."""
    if content_length is None:
        return False
    try:
        return int(content_length) > limit
    except ValueError:
        return True


def server_timing(durations_ms: Mapping[str, float], prefix: str = "") -> str:
    """A Server-Timing header's value: one `<prefix><name>;dur=<ms>` metric per entry."""
    return ", ".join(f"{prefix}{name};dur={ms:.3f}" for name, ms in durations_ms.items())


def request_id(scope: Scope) -> str:
    """The request's `X-Request-ID` (Serve's proxy sets one), else a new one."""
    for name, value in scope.get("headers") or ():
        if name == b"x-request-id":
            return str(value.decode("latin-1"))[:128]
    return os.urandom(8).hex()


@dataclass
class Metrics:
    """ASGI middleware counting requests and timing them by route and status
    (ragindex.telemetry); each response says how long this replica held it
    (`Server-Timing: app;dur=<ms>`), so a client can tell the replica's time from the proxy's
    and the network's. Whatever the request logs carries its request id.

    Plain ASGI rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware runs the
    app in a separate task with stream plumbing, a cost paid on every search.
    """

    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with request_id_scope(request_id(scope)):
            await self._timed(scope, receive, send)

    async def _timed(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                held_ms = (time.perf_counter() - start) * 1000
                timing = (b"server-timing", server_timing({"app": held_ms}).encode())
                message = {**message, "headers": [*message.get("headers", ()), timing]}
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # The router records the matched route in the (shared) scope while it handles.
            path = getattr(scope.get("route"), "path", "unmatched")
            observe_http(path, status, time.perf_counter() - start)


@dataclass
class BodyLimit:
    """ASGI middleware: 413 for a body over the limit, declared or streamed (chunked)."""

    app: ASGIApp
    limit: int

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if body_too_large(declared.decode("latin-1") if declared else None, self.limit):
            await _send_413(send, self.limit)
            return
        seen = 0
        refused = False

        async def limited_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit and not refused:
                    # Answer 413 now and tell the app the client left, so it stops reading.
                    refused = True
                    await _send_413(send, self.limit)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, limited_receive, guarded_send)


async def _send_413(send: Send, limit: int) -> None:
    body = JSONResponse(
        problem("too-large", f"request body is larger than the limit of {limit} bytes"),
        status_code=413,
        media_type=PROBLEM_MEDIA_TYPE,
    )
    await send({"type": "http.response.start", "status": 413, "headers": body.raw_headers})
    await send({"type": "http.response.body", "body": body.body})
