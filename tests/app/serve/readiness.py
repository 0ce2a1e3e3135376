"""Waiting for a deployed Serve application, shared by the serve tests' fixtures."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx


def wait_running_and_ready(
    client: Callable[[], httpx.Client], name: str, timeout_s: float = 420.0
) -> None:
    """Until application `name` is RUNNING and /readyz answers 200 (through `client()`);
    fail fast if it failed to deploy."""
    from ray import serve

    deadline = time.monotonic() + timeout_s
    with client() as http:
        while time.monotonic() < deadline:
            status = serve.status().applications.get(name)
            if status is not None and status.status == "DEPLOY_FAILED":
                raise RuntimeError(f"{name} failed to deploy: {status.message}")
            if status is not None and status.status == "RUNNING":
                try:
                    if http.get("/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
            time.sleep(0.5)
    raise TimeoutError(f"{name} not ready within {timeout_s} s: {serve.status()}")
