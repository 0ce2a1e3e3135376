"""Per-tenant admission: the pure limiter, and the 429 + Retry-After it makes at the HTTP layer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragindex.config import LimitsSpec, RagIndexSpec
from ragindex.router import TenantLimiter, TokenVerifier, create_app, create_token


def test_concurrency_limit_is_per_tenant_and_freed_on_release() -> None:
    limiter = TenantLimiter(LimitsSpec(max_concurrent=2, requests_per_s=1000, burst=1000))
    assert limiter.admit("a", 0.0).admitted and limiter.admit("a", 0.0).admitted
    refused = limiter.admit("a", 0.0)
    assert not refused.admitted and refused.retry_after_s == 1 and "in flight" in refused.reason
    assert limiter.admit("b", 0.0).admitted  # another tenant keeps its share
    limiter.release("a")
    assert limiter.admit("a", 0.0).admitted
    assert limiter.in_flight("a") == 2


def test_rate_limit_refills_with_time_and_says_when_to_retry() -> None:
    limiter = TenantLimiter(LimitsSpec(max_concurrent=100, requests_per_s=0.5, burst=2))
    for _ in range(2):
        assert limiter.admit("a", 10.0).admitted
        limiter.release("a")
    refused = limiter.admit("a", 10.0)
    assert (
        not refused.admitted and refused.retry_after_s == 2 and "0.5 requests/s" in refused.reason
    )
    assert not limiter.admit("a", 11.0).admitted  # half a token is not a request
    assert limiter.admit("a", 12.0).admitted
    assert limiter.in_flight("a") == 1


def test_a_refused_request_takes_nothing() -> None:
    limiter = TenantLimiter(LimitsSpec(max_concurrent=1, requests_per_s=1, burst=1))
    assert limiter.admit("a", 0.0).admitted
    assert not limiter.admit("a", 5.0).admitted  # busy: the refill is kept, no token spent
    limiter.release("a")
    assert limiter.admit("a", 5.0).admitted


def test_release_without_admission_is_a_bug() -> None:
    with pytest.raises(RuntimeError, match="without an admitted request"):
        TenantLimiter(LimitsSpec()).release("a")


def test_limits_are_part_of_the_spec() -> None:
    spec = RagIndexSpec.model_validate(
        {"limits": {"maxConcurrent": 4, "requestsPerS": 2.5, "burst": 10}}
    )
    assert spec.limits == LimitsSpec(max_concurrent=4, requests_per_s=2.5, burst=10)


class SlowStats:
    """Only what these requests reach; the stats call waits until released (a slow backend)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def stats(self, tenant_id: str) -> dict[str, Any]:
        await self.gate.wait()
        return {
            "tenant": tenant_id,
            "chunks": 0,
            "documents": 0,
            "dense_vectors": 0,
            "lexical_docs": 0,
            "shards": 1,
            "freshness_bound_s": 2.0,
            "wal_offsets": {"0": 12345},  # what the replica knows, not the tenant's to see
        }


@pytest.mark.anyio
async def test_429_with_retry_after_for_the_flooding_tenant_only(tmp_path: Path) -> None:
    tokens = {t: create_token(tmp_path, t) for t in ("flood", "calm")}
    backend = SlowStats()
    now = [0.0]
    app = create_app(
        backend,  # type: ignore[arg-type]
        TokenVerifier(tmp_path),
        limits=LimitsSpec(max_concurrent=2, requests_per_s=1, burst=3),
        clock=lambda: now[0],
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        before = refusals((await client.get("/metrics")).text)

        def get(tenant: str) -> Any:
            return client.get("/v1/stats", headers={"Authorization": f"Bearer {tokens[tenant]}"})

        flood = [asyncio.create_task(get("flood")) for _ in range(2)]
        await asyncio.sleep(0.05)
        busy = await get("flood")
        assert busy.status_code == 429 and busy.headers["Retry-After"] == "1"
        assert "in flight" in busy.json()["detail"]
        calm = asyncio.create_task(get("calm"))
        await asyncio.sleep(0.05)
        backend.gate.set()
        assert [r.status_code for r in await asyncio.gather(*flood)] == [200, 200]
        calm_response = await calm
        assert calm_response.status_code == 200
        assert "wal_offsets" not in calm_response.json()  # tenant-scoped stats
        # "flood" has spent 2 of its burst of 3 (the refusal took none): one more, then 429.
        assert (await get("flood")).status_code == 200
        over = await get("flood")
        assert over.status_code == 429 and over.headers["Retry-After"] == "1"
        now[0] += 1.0
        assert (await get("flood")).status_code == 200
        # each 429 counted by the limit that refused it; no tenant in the metrics
        metrics = (await client.get("/metrics")).text
        after = refusals(metrics)
        assert after["concurrency"] - before["concurrency"] == 1
        assert after["rate"] - before["rate"] == 1
        assert "flood" not in metrics and "calm" not in metrics


def refusals(metrics: str) -> dict[str, float]:
    """ragindex_admission_refused_total by reason."""
    found = {"concurrency": 0.0, "rate": 0.0}
    for family in text_string_to_metric_families(metrics):
        for s in family.samples:
            if s.name == "ragindex_admission_refused_total":
                found[s.labels["reason"]] = s.value
    return found
