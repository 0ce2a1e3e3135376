"""A server binary the tests run on loopback (Prometheus, the OpenTelemetry Collector): started
in its own session with its log in a run directory, waited for with a bounded readiness check,
stopped and its files removed."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from ragindex.errors import BackendUnavailable
from ragindex.netutil import port_open

LOG_FILE = "server.log"


@dataclass
class LoopbackProcess:
    """A running server on 127.0.0.1:`port` whose files live in `run_dir`."""

    port: int
    run_dir: Path
    process: subprocess.Popen[bytes]
    host: str = "127.0.0.1"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return (self.run_dir / LOG_FILE).read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """End the server and remove its files."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.run_dir, ignore_errors=True)


def spawn(argv: Sequence[str], run_dir: Path) -> subprocess.Popen[bytes]:
    """Start `argv` in a session of its own, its output in the run directory's log."""
    with open(run_dir / LOG_FILE, "wb") as log:
        return subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def wait_ready(
    server: LoopbackProcess, ready: Callable[[], bool], what: str, timeout_s: float
) -> None:
    """Until `ready()` once the port is open (transport errors count as not yet), at most
    `timeout_s`; a server that exits or never gets ready is stopped and BackendUnavailable
    raised with its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = server.log_tail()
            server.stop()
            raise BackendUnavailable(f"{what} exited during start-up:\n{tail}")
        if port_open(server.port):
            with contextlib.suppress(httpx.TransportError):
                if ready():
                    return
        time.sleep(0.2)
    tail = server.log_tail()
    server.stop()
    raise BackendUnavailable(f"{what} not ready after {timeout_s:.0f} s:\n{tail}")
