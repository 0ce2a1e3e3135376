"""Per-tenant admission: how many requests a tenant may have in flight, and how fast it may send.

A token bucket per tenant (`requests_per_s` sustained, `burst` at once) and a count of the
tenant's requests in flight (`max_concurrent`). The decision is pure: the caller passes the
clock, so a test can walk time forward. One limiter per Router replica; a tenant's share of
the whole service is its share per replica times the replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ragindex.config import LimitsSpec


@dataclass(frozen=True)
class Admission:
    """Whether a request may go on; when not, why and when to try again (whole seconds, as
    the Retry-After header wants them)."""

    admitted: bool
    retry_after_s: int = 0
    reason: str = ""
    kind: str = ""  # which limit refused it: "concurrency" or "rate" (a metric's label)


@dataclass
class _Bucket:
    tokens: float
    updated: float
    in_flight: int = 0


@dataclass
class TenantLimiter:
    limits: LimitsSpec
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def admit(self, tenant_id: str, now: float) -> Admission:
        """Take a slot and a token for one request of a tenant, or say why not (taking none).

        An admitted request must be followed by exactly one `release` of the same tenant."""
        limits = self.limits
        bucket = self._buckets.setdefault(tenant_id, _Bucket(float(limits.burst), now))
        elapsed = max(0.0, now - bucket.updated)
        bucket.tokens = min(float(limits.burst), bucket.tokens + elapsed * limits.requests_per_s)
        bucket.updated = now
        if bucket.in_flight >= limits.max_concurrent:
            return Admission(
                False,
                retry_after_s=1,
                kind="concurrency",
                reason=f"tenant {tenant_id!r} already has {bucket.in_flight} requests in flight"
                f" (limit {limits.max_concurrent}); retry when one has finished",
            )
        if bucket.tokens < 1.0:
            wait = (1.0 - bucket.tokens) / limits.requests_per_s
            return Admission(
                False,
                retry_after_s=max(1, math.ceil(wait)),
                kind="rate",
                reason=f"tenant {tenant_id!r} is over its rate of {limits.requests_per_s:g}"
                f" requests/s (burst {limits.burst})",
            )
        bucket.tokens -= 1.0
        bucket.in_flight += 1
        return Admission(True)

    def release(self, tenant_id: str) -> None:
        """One admitted request of the tenant has finished."""
        bucket = self._buckets.get(tenant_id)
        if bucket is None or bucket.in_flight <= 0:
            raise RuntimeError(f"release of tenant {tenant_id!r} without an admitted request")
        bucket.in_flight -= 1

    def in_flight(self, tenant_id: str) -> int:
        bucket = self._buckets.get(tenant_id)
        return bucket.in_flight if bucket is not None else 0
