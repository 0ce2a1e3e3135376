"""The I/O a promotion needs besides the Kubernetes API: read a generation's build report from
its app, and move the Elasticsearch read alias. Decisions live in promotion.py.

Both calls are bounded by a timeout and never retried here: the readiness timer runs again.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from ragindex.errors import InvalidInput
from ragindex.generations import BuildReport, alias_switch

TIMEOUT_S = 5.0


async def read_build_report(
    url: str, token: str, timeout_s: float = TIMEOUT_S
) -> BuildReport | None:
    """The report the generation's Router serves at `url`, asked with the index's report
    credential; None while it does not answer (its pods are starting) or answers with
    something that is not a report."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await client.get(url, headers={"Authorization": f"Bearer {token}"})
        if response.status_code != 200:
            return None
        return BuildReport.from_json(response.json())
    except (httpx.HTTPError, ValueError, InvalidInput):
        return None


async def switch_read_alias(
    es_url: str,
    alias: str,
    index: str,
    auth: tuple[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
    *,
    api_key: str | None = None,
    ca_pem: str | None = None,
) -> list[dict[str, Any]]:
    """Point `alias` at `index` alone with one `_aliases` call (the removes and the add apply
    atomically); returns the actions sent. Raises httpx.HTTPError if Elasticsearch refuses.

    `auth` is basic auth, `api_key` the encoded API key (exclusive); `ca_pem` the CA(s) an
    https server's certificate is verified against (else the system's)."""
    if auth is not None and api_key is not None:
        raise ValueError("give basic auth or an API key, not both")
    headers = {"Authorization": f"ApiKey {api_key}"} if api_key is not None else None
    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cadata=ca_pem) if ca_pem is not None else True
    )
    async with httpx.AsyncClient(
        base_url=es_url, timeout=timeout_s, auth=auth, headers=headers, verify=verify
    ) as client:
        found = await client.get(f"/_alias/{alias}")
        if found.status_code == 404:
            current: list[str] = []
        else:
            found.raise_for_status()
            current = sorted(found.json())
        actions = alias_switch(alias, current, index)
        response = await client.post("/_aliases", json={"actions": actions})
        response.raise_for_status()
    return actions
