"""Fixtures for the router's answer tests: a recording chat-completions stub (the hit builders
they share with measure/evals live in tests/conftest.py).

The stub HTTP server stands in for an LLM endpoint only because no LLM can run offline here;
it records every request so tests can assert on the exact prompt that would be sent.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


@dataclass
class ChatStub:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    reply: str = "The sources do not contain the answer."
    status: int = 200
    raw_body: bytes | None = None  # sent instead of a chat completion when set


@pytest.fixture
def chat_stub() -> Iterator[ChatStub]:
    """A local OpenAI-compatible /v1/chat/completions endpoint that records each request."""
    stub = ChatStub(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/chat/completions":
                self.send_response(404)
                self.end_headers()
                return
            stub.requests.append(json.loads(body))
            stub.headers.append({k.lower(): v for k, v in self.headers.items()})
            payload = stub.raw_body
            if payload is None:
                payload = json.dumps(
                    {
                        "id": "stub-1",
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": stub.reply},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                ).encode()
            self.send_response(stub.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
