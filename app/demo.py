"""`ragindex demo`: the main job end to end on one machine.

Starts `ragindex serve` on a data directory, mints a token, ingests a real corpus through the
HTTP API (Cranfield from ../shared/data, or a folder the user names), asks a few questions and
prints their cited hits, then stops the server. Everything goes through real HTTP, so what the
demo shows is what a client of the server gets.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

from ragindex.app.http_ingest import post_documents
from ragindex.app.loading import cranfield_dir, cranfield_documents, documents_from_paths
from ragindex.errors import RagIndexError
from ragindex.types import Document

DEFAULT_QUERIES = (
    "what similarity laws must be obeyed when constructing aeroelastic models of heated high"
    " speed aircraft",
    "how does the boundary layer behave on a flat plate in hypersonic flow",
    "effect of sweep on wing flutter",
)
READY_TIMEOUT_S = 600
BATCH = 32


def _documents(corpus: Path | None) -> list[Document]:
    if corpus is not None:
        return documents_from_paths([corpus], source=None)
    return cranfield_documents(cranfield_dir())


def _wait_ready(base: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RagIndexError(f"ragindex serve exited with status {server.returncode}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RagIndexError(f"server at {base} was not ready within {READY_TIMEOUT_S} s")


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


def demo_command(args: argparse.Namespace) -> int:
    documents = _documents(args.corpus)
    queries = args.query or (DEFAULT_QUERIES if args.corpus is None else ("overview",))
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="ragindex-demo-"))
    exe = [sys.executable, "-m", "ragindex.app.cli"]
    token = (
        subprocess.run(
            [*exe, "token", "create", "--tenant", "demo", "--data-dir", str(data_dir)],
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    base = f"http://127.0.0.1:{args.port}"
    print(f"starting ragindex serve on {base} (data in {data_dir})", flush=True)
    server = subprocess.Popen(
        [*exe, "serve", "--data-dir", str(data_dir), "--port", str(args.port)],
        start_new_session=True,
    )
    try:
        _wait_ready(base, server)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=headers, timeout=300) as client:
            with tqdm(total=len(documents), unit="doc", desc="ingest over HTTP") as bar:
                post_documents(client, documents, batch=BATCH, wait=True, progress=bar.update)
            chunks = client.get("/v1/stats").json()["chunks"]
            print(f"{len(documents)} documents in the log, {chunks} chunks searchable")
            for query in queries:
                response = client.post(
                    "/v1/search", json={"query": query, "k": 5, "mode": "hybrid"}
                )
                response.raise_for_status()
                _print_answer(query, response.json())
    finally:
        _stop(server)
    return 0


def _print_answer(query: str, body: dict[str, Any]) -> None:
    print(f"\nQ: {query}")
    for n, hit in enumerate(body["hits"], start=1):
        text = " ".join(hit["text"].split())
        ranks = " ".join(f"{leg}#{rank}" for leg, rank in sorted(hit["ranks"].items()))
        print(f"  [{n}] {hit['chunk_id']}  {hit['title'][:70]}  ({ranks})")
        print(f"      {text[:200]}{'...' if len(text) > 200 else ''}")
    stages = ", ".join(f"{k} {v:.1f} ms" for k, v in body["timings_ms"].items())
    print(f"  timings: {stages}")
