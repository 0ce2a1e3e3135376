"""Kill -9 of `ragindex serve` during a batch ingest: every acknowledged chunk survives.

Runs the real CLI in its own process group (Ray's GCS, raylet and workers included), kills
the whole group with SIGKILL while a thread is ingesting, restarts on the same data dir and
checks every acknowledged chunk through both legs over HTTP.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragindex.router.auth import create_token

pytestmark = [pytest.mark.serve, pytest.mark.slow]

BATCH = 4
RAGINDEX = Path(sys.executable).with_name("ragindex")


class Server:
    def __init__(self, data_dir: Path, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [str(RAGINDEX), "serve", "--data-dir", str(data_dir), "--port", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so kill -9 reaches all of Ray
            env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        )

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "ragindex serve exited early; see its log"
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise TimeoutError("ragindex serve did not become ready")

    def kill_group(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        _wait_group_gone(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        _wait_group_gone(self.proc.pid, kill=True)
        self.log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_group_gone(pgid: int, kill: bool = False, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL if kill else 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)


def doc(n: int) -> dict[str, Any]:
    return {
        "source": "crash",
        "doc_id": f"d{n}",
        "title": f"Durability record {n}",
        "text": f"durability record number {n} carries the marker word zq{n}x for retrieval.",
    }


def test_acknowledged_chunks_survive_kill_9(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    token = create_token(data_dir, "crash")
    headers = {"Authorization": f"Bearer {token}"}
    server = Server(data_dir, tmp_path / "serve.log")
    acked: list[str] = []
    errors: list[str] = []
    stop = threading.Event()
    try:
        server.wait_ready()

        def ingest() -> None:
            n = 0
            with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
                while not stop.is_set():
                    batch = [doc(n + i) for i in range(BATCH)]
                    try:
                        r = client.post("/v1/documents", json={"documents": batch})
                    except httpx.TransportError:
                        return  # the server died mid-request: this batch is not acknowledged
                    if r.status_code != 200:
                        errors.append(r.text)
                        return
                    acked.extend(f"crash:{d['doc_id']}:0" for d in batch)
                    n += BATCH

        writer = threading.Thread(target=ingest)
        writer.start()
        deadline = time.monotonic() + 120
        while len(acked) < 5 * BATCH and time.monotonic() < deadline and writer.is_alive():
            time.sleep(0.01)
        server.kill_group()
        stop.set()
        writer.join(timeout=60)
    finally:
        stop.set()
        server.stop()
    assert not errors, errors
    assert len(acked) >= 5 * BATCH, f"only {len(acked)} chunks were acknowledged"

    restarted = Server(data_dir, tmp_path / "serve2.log")
    try:
        restarted.wait_ready()
        with httpx.Client(base_url=restarted.url, headers=headers, timeout=60) as client:
            found: dict[str, set[str]] = {}
            for mode in ("dense", "lexical"):
                r = client.post(
                    "/v1/search", json={"query": "durability record", "k": 100, "mode": mode}
                )
                assert r.status_code == 200, r.text
                found[mode] = {h["chunk_id"] for h in r.json()["hits"]}
            for cid in acked[:10]:
                n = cid.split(":")[1][1:]
                r = client.post("/v1/search", json={"query": f"zq{n}x", "k": 1})
                assert [h["chunk_id"] for h in r.json()["hits"]] == [cid]
    finally:
        restarted.stop()
    for mode, ids in found.items():
        missing = set(acked) - ids
        assert not missing, f"{mode} leg lost acknowledged chunks: {sorted(missing)}"
