"""`--runtime local`: deploy RagIndexes to a local Ray through the dashboard's Serve REST API.

This is what KubeRay does with `serveConfigV2`: `PUT /api/serve/applications/` with a whole
ServeDeploySchema. The PUT replaces the full set of applications, so several RagIndexes share
one Serve instance by read-modify-write: read what runs, replace our application, put the set
back (under a lock, so two reconciles in one operator cannot drop each other's app). Each
RagIndex is one application named `<namespace>.<name>` under the route `/<namespace>/<name>`.
The merge and status decisions are pure functions; `ServeRestClient` only does the HTTP.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from ragindex.config import RagIndexSpec
from ragindex.operator.status import Verdict
from ragindex.serve_config import render_serve_config

APPLICATIONS_PATH = "/api/serve/applications/"


def app_name(namespace: str, name: str) -> str:
    """Unique per RagIndex: namespaces cannot contain '.', so the split is unambiguous."""
    return f"{namespace}.{name}"


def route_prefix(namespace: str, name: str) -> str:
    return f"/{namespace}/{name}"


def local_endpoint(host: str, port: int, namespace: str, name: str) -> str:
    return f"http://{host}:{port}{route_prefix(namespace, name)}/"


def render_local(
    namespace: str,
    name: str,
    spec: RagIndexSpec,
    *,
    data_dir: str,
    host: str,
    port: int,
) -> dict[str, Any]:
    """The Serve config of one RagIndex on the local runtime (co-located layout)."""
    return render_serve_config(
        spec,
        name=app_name(namespace, name),
        data_dir=data_dir,
        runtime="local",
        host=host,
        port=port,
        route_prefix=route_prefix(namespace, name),
    )


def _deployed_apps(details: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Applications that were deployed from a config (those a PUT can carry over)."""
    apps = details.get("applications") or {}
    return {
        name: dict(app["deployed_app_config"])
        for name, app in apps.items()
        if app.get("deployed_app_config")
    }


def merge_application(details: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """The PUT body: every running app except ours kept as deployed, ours replaced or added."""
    mine = list(ours["applications"])
    replaced = {a["name"] for a in mine}
    others = [a for n, a in _deployed_apps(details).items() if n not in replaced]
    return {**{k: v for k, v in ours.items() if k != "applications"}, "applications": others + mine}


def without_application(details: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The PUT body with one app removed, or None when it was not there (nothing to do)."""
    apps = _deployed_apps(details)
    if name not in apps:
        return None
    body: dict[str, Any] = {"applications": [a for n, a in apps.items() if n != name]}
    for key in ("proxy_location", "http_options"):
        if details.get(key):
            body[key] = details[key]
    return body


def serve_app_verdict(details: Mapping[str, Any], name: str) -> Verdict:
    """Ready from the Serve application status (RUNNING is the only serving state)."""
    app = (details.get("applications") or {}).get(name)
    if app is None:
        return Verdict(False, "Progressing", f"Serve application {name} is not deployed yet")
    state = app.get("status", "")
    message = app.get("message") or state
    if state == "RUNNING":
        return Verdict(True, "Serving", f"Serve application {name} is running")
    if state == "DEPLOY_FAILED":
        return Verdict(False, "ServeFailed", message)
    if state == "UNHEALTHY":
        return Verdict(False, "Unhealthy", message)
    return Verdict(False, "Progressing", f"Serve application {name} is {state}: {message}")


def ray_auth_token(environ: Mapping[str, str]) -> str | None:
    """The local Ray's auth token as Ray's own clients find it (RAY_AUTH_TOKEN, else the file
    RAY_AUTH_TOKEN_PATH names, as `ragindex serve` sets up); None when Ray runs without auth."""
    if environ.get("RAY_AUTH_TOKEN"):
        return environ["RAY_AUTH_TOKEN"].strip()
    path = environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(path).read_text().strip() or None if path and Path(path).is_file() else None


class ServeRestClient:
    """The Ray dashboard's Serve REST API, with read-modify-write of the application set."""

    def __init__(self, dashboard_url: str, *, timeout_s: float = 30.0) -> None:
        token = ray_auth_token(os.environ)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=dashboard_url.rstrip("/"), timeout=timeout_s, headers=headers
        )
        self._lock = asyncio.Lock()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def details(self) -> dict[str, Any]:
        response = await self._http.get(APPLICATIONS_PATH, params={"api_type": "declarative"})
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    async def _put(self, body: Mapping[str, Any]) -> None:
        response = await self._http.put(APPLICATIONS_PATH, json=body)
        if response.is_error:
            raise RuntimeError(
                f"Serve REST API refused the config ({response.status_code}): {response.text}"
            )

    async def deploy(self, config: Mapping[str, Any]) -> None:
        """Put our application(s) beside whatever else runs."""
        async with self._lock:
            await self._put(merge_application(await self.details(), config))

    async def remove(self, name: str) -> None:
        """Remove one application; the others keep running."""
        async with self._lock:
            body = without_application(await self.details(), name)
            if body is not None:
                await self._put(body)
