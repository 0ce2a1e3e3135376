"""Who may read a generation's build report (GET /v1/generation): making it reads the whole
corpus, so it is never anonymous (#29 item 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from ragindex.router import TokenVerifier, create_app, create_token

REPORT = {"generation": "g1", "consumed": 3, "end": 3, "checks": None, "waiting_on": []}


class Reports:
    """Only what these requests reach: the report, counted."""

    def __init__(self) -> None:
        self.made = 0

    async def generation_report(self) -> dict[str, Any]:
        self.made += 1
        return REPORT


async def statuses(app: Any, headers: list[dict[str, str]]) -> list[int]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return [(await client.get("/v1/generation", headers=h)).status_code for h in headers]


@pytest.mark.anyio
async def test_in_the_cluster_only_the_report_credential_reads_it(tmp_path: Path) -> None:
    tenant = create_token(tmp_path, "alpha")
    backend = Reports()
    app = create_app(backend, TokenVerifier(tmp_path), report_token="s3cret-report")  # type: ignore[arg-type]
    got = await statuses(
        app,
        [
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Bearer {tenant}"},  # a tenant's token is not the operator's
            {"Authorization": "Bearer s3cret-report"},
        ],
    )
    assert got == [401, 401, 401, 200]
    assert backend.made == 1  # a refused caller makes no report


@pytest.mark.anyio
async def test_without_a_report_credential_any_api_token_reads_it(tmp_path: Path) -> None:
    tenant = create_token(tmp_path, "alpha")
    backend = Reports()
    app = create_app(backend, TokenVerifier(tmp_path))  # type: ignore[arg-type]
    got = await statuses(
        app, [{}, {"Authorization": "Bearer nope"}, {"Authorization": f"Bearer {tenant}"}]
    )
    assert got == [401, 401, 200] and backend.made == 1
