"""The saturation ramp's load client against a real HTTP server on loopback: what it sends, how
it counts answers, refusals and refused connections, and that it keeps one connection per
client."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ragindex.measure.bench.load import SearchClient, closed_loop

TOKEN = "t0ken"


class SearchServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), SearchHandler)
        self.bodies: list[dict[str, object]] = []
        self.connections: set[int] = set()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class SearchHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Router's server
    server: SearchServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.bodies.append(body)
            self.server.connections.add(self.client_address[1])
        authorized = self.headers["Authorization"] == f"Bearer {TOKEN}"
        refused = not authorized or self.path != "/v1/search" or body["query"].startswith("bad")
        answer = b'{"hits": []}'
        self.send_response(429 if refused else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def server() -> Iterator[SearchServer]:
    s = SearchServer()
    thread = threading.Thread(target=s.serve_forever, daemon=True)
    thread.start()
    yield s
    s.shutdown()
    s.server_close()
    thread.join(timeout=5)


def queries(bad_every: int = 0) -> Iterator[str]:
    for n in itertools.count():
        yield f"bad {n}" if bad_every and n % bad_every == 0 else f"query {n}"


def test_each_client_keeps_one_connection_and_every_answer_counts(server: SearchServer) -> None:
    level = closed_loop(
        lambda: SearchClient(server.url, TOKEN), queries(), 2, 0.5, lambda q: {"query": q, "k": 3}
    )
    assert level["errors"] == 0 and level["answered"] == len(server.bodies) > 0
    assert level["clients"] == 2 and len(server.connections) == 2
    assert all(b["k"] == 3 for b in server.bodies)
    assert len({b["query"] for b in server.bodies}) == len(server.bodies)  # every query unique
    assert level["p50_ms"] <= level["p99_ms"] and level["client_cpu_ms_per_search"] > 0


def test_refused_searches_are_errors_not_answers(server: SearchServer) -> None:
    level = closed_loop(
        lambda: SearchClient(server.url, TOKEN), queries(3), 1, 0.3, lambda q: {"query": q}
    )
    refused = sum(1 for b in server.bodies if str(b["query"]).startswith("bad"))
    assert refused > 0 and level["errors"] == refused
    assert level["answered"] == len(server.bodies) - refused


def test_a_refused_connection_counts_as_an_error_in_the_level(server: SearchServer) -> None:
    port = server.server_address[1]
    server.shutdown()
    server.server_close()  # nothing listens on the port now
    with pytest.raises(OSError):
        SearchClient(f"http://127.0.0.1:{port}", TOKEN).post("/v1/search", {"query": "q"})
    level = closed_loop(
        lambda: SearchClient(f"http://127.0.0.1:{port}", TOKEN),
        queries(),
        1,
        0.2,
        lambda q: {"query": q},
    )
    assert level["answered"] == 0 and level["errors"] > 0


def test_only_plain_http_urls_are_taken() -> None:
    with pytest.raises(ValueError, match="plain http"):
        SearchClient("https://127.0.0.1:1", TOKEN)
