"""Kill -9 of `ragindex serve` during a batch ingest: every acknowledged document survives.

A document is acknowledged (202) once it is durable in the log; after the restart the ingest
worker resumes from its committed offset and every acknowledged document becomes searchable.

Runs the real CLI in its own session. Ray puts each worker (the Serve replicas) in a process
group of its own, so "kill -9 the process group" alone would leave the Ingest replica alive for
a while, holding the shard and tantivy write locks. The test SIGKILLs every process of the
session at once and waits until none is left (never `ray stop --force`: that would stop other
users' Ray on this machine), restarts on the same data dir and checks every acknowledged chunk
through both legs over HTTP.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragindex.app import runtime_memory
from ragindex.netutil import free_port
from ragindex.router import create_token

pytestmark = [pytest.mark.serve, pytest.mark.slow]

BATCH = 4
MIN_ACKED = 5 * BATCH
READY_TIMEOUT_S = 360.0  # Ray + two MiniLM replicas on a loaded 2-core box
CATCH_UP_S = 180.0
RAGINDEX = Path(sys.executable).with_name("ragindex")


def session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of one session, from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited while we looked
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            pids.append(int(stat.parent.name))
    return pids


def kill_session(sid: int, sig: signal.Signals) -> None:
    for pid in session_pids(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_session_gone(sid: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while session_pids(sid):
        if time.monotonic() > deadline:
            kill_session(sid, signal.SIGKILL)
            raise TimeoutError(f"processes of session {sid} outlived SIGKILL: {session_pids(sid)}")
        time.sleep(0.2)


class Server:
    def __init__(self, data_dir: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["RAGINDEX_DASHBOARD_PORT"] = str(free_port())  # never clash with another Ray
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(RAGINDEX), "serve", "--data-dir", str(data_dir), "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # session id == pid: every Ray process is findable
                env=env,
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"ragindex serve exited early:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise TimeoutError(
            f"ragindex serve was not ready in {READY_TIMEOUT_S} s:\n{self.log_tail()}"
        )

    def roles(self) -> list[str]:
        """What each process of the runtime is (the CLI's tree: Ray's and Serve's)."""
        return [row["role"] for row in runtime_memory(self.proc.pid)["processes"]]

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def kill_9(self) -> None:
        """SIGKILL every process of the server's session, then wait until all are gone."""
        kill_session(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        wait_session_gone(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL whatever is left of the session."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        kill_session(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=30)
        wait_session_gone(self.proc.pid)


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
        # the default runtime (#16): no dashboard modules (~1 GB of RSS), Serve without them
        roles = server.roles()
        assert not [r for r in roles if "dashboard-" in r], roles
        assert any("Router" in r for r in roles) and any("Ingest" in r for r in roles), roles

        def ingest() -> None:
            n = 0
            with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
                while not stop.is_set():
                    batch = [doc(n + i) for i in range(BATCH)]
                    try:
                        r = client.post("/v1/documents", json={"documents": batch})
                    except httpx.TransportError:
                        return  # the server died mid-request: this batch is not acknowledged
                    if r.status_code != 202:  # accepted: durable in the log
                        errors.append(r.text)
                        return
                    acked.extend(f"crash:{d['doc_id']}:0" for d in batch)
                    n += BATCH

        writer = threading.Thread(target=ingest)
        writer.start()
        deadline = time.monotonic() + 120
        while len(acked) < MIN_ACKED and time.monotonic() < deadline and writer.is_alive():
            time.sleep(0.01)
        server.kill_9()
        stop.set()
        writer.join(timeout=60)
    finally:
        stop.set()
        server.stop()
    assert not errors, errors
    assert MIN_ACKED <= len(acked) <= 100, f"{len(acked)} chunks acknowledged"  # k=100 below

    restarted = Server(data_dir, tmp_path / "serve2.log")
    try:
        restarted.wait_ready()
        with httpx.Client(base_url=restarted.url, headers=headers, timeout=60) as client:
            # the restarted worker resumes from its committed `docs` offset; views catch up.
            # Both legs: searches run beside the views' refresh, which applies the dense
            # replicas first and then the BM25 view, one partition after the other.
            deadline = time.monotonic() + CATCH_UP_S
            while True:
                stats = client.get("/v1/stats").json()
                if min(stats["dense_vectors"], stats["lexical_docs"]) >= len(acked):
                    break
                assert time.monotonic() < deadline, (
                    f"acknowledged chunks never all applied: {stats}"
                )
                time.sleep(0.5)
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
