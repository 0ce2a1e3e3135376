"""`ragindex serve` runs Ray with token authentication: a job without the data directory's
token is refused, the API still serves (issue #14: the local runtime forced auth off, so anyone
who reached Ray's ports could run code that reads every tenant's chunks). Its one Router
replica answers the documented port itself, on loopback (direct ingress, #16). Ray's dashboard
(off by default) is switched on here: its job API is the HTTP door that auth must close."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from ragindex.app.serve_cli import RAY_TOKEN_FILE, ensure_ray_token
from ragindex.netutil import free_port

RAGINDEX = Path(sys.executable).parent / "ragindex"
READY_TIMEOUT_S = 300.0
JOB = {"entrypoint": "cat /proc/self/environ", "submission_id": "ragindex-auth-probe"}

pytestmark = pytest.mark.serve


@dataclass
class Running:
    url: str
    dashboard: str
    data_dir: Path


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    data_dir = tmp_path_factory.mktemp("ray-auth")
    port, dashboard_port = free_port(), free_port()
    log = data_dir.parent / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "disabled"  # what the old runtime forced: serve must turn it on
    env["RAGINDEX_DASHBOARD"] = "1"  # off by default (#16); its job API is where auth shows
    env["RAGINDEX_DASHBOARD_PORT"] = str(dashboard_port)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(RAGINDEX), "serve", "--data-dir", str(data_dir), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "not ready: " + log.read_text()[-3000:]
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            time.sleep(0.5)
        yield Running(url, f"http://127.0.0.1:{dashboard_port}", data_dir)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_the_token_lives_in_the_data_dir_readable_by_its_owner_only(running: Running) -> None:
    path = running.data_dir / RAY_TOKEN_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().strip()) == 64
    assert ensure_ray_token(running.data_dir) == path  # kept, not replaced, on restart


def test_a_job_without_the_token_is_refused(running: Running) -> None:
    token = (running.data_dir / RAY_TOKEN_FILE).read_text().strip()
    jobs = f"{running.dashboard}/api/jobs/"
    refused = httpx.post(jobs, json=JOB, timeout=30)
    assert refused.status_code == 401, refused.text
    wrong = httpx.post(jobs, json=JOB, headers={"Authorization": "Bearer " + "0" * 64}, timeout=30)
    assert wrong.status_code == 403, wrong.text
    listed = httpx.get(jobs, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert listed.status_code == 200, listed.text
    assert JOB["submission_id"] not in listed.text  # neither refused job ever ran


def test_the_api_serves_with_ray_auth_on(running: Running, tmp_path: Path) -> None:
    from ragindex.router import create_token

    token = create_token(running.data_dir, "acme")
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=running.url, headers=headers, timeout=60) as client:
        doc = {"source": "s", "doc_id": "1", "text": "Lift grows with the angle of attack."}
        written = client.post("/v1/documents", json={"documents": [doc]}, params={"wait": "true"})
        assert written.status_code == 202 and written.json()["applied"], written.text
        hits = client.post("/v1/search", json={"query": "angle of attack", "k": 1}).json()["hits"]
        assert hits and hits[0]["doc_id"] == "1"


def test_the_router_replica_itself_listens_on_the_port(running: Running) -> None:
    port = int(running.url.rsplit(":", 1)[1])
    listening = [
        c
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
    ]
    owners = [" ".join(psutil.Process(c.pid).cmdline()) for c in listening if c.pid]
    assert len(owners) == 1 and "Router" in owners[0], owners  # not Serve's ProxyActor
    assert listening[0].laddr.ip == "127.0.0.1"
    r = httpx.post(f"{running.url}/v1/search", json={"query": "lift"}, timeout=30)
    assert r.status_code == 401  # the replica's own app: auth first
