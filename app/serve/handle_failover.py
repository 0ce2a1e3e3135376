"""Calls through a deployment handle that fail over instead of hanging (router.failover).

`call(send, policy)` sends a request with `send()` (a `handle.method.remote(...)`), waits at
most the try's timeout for it, and on a slow, dead or still-opening replica sends it again:
Serve routes the new try to a replica it still believes alive, and drops the dead one once
Ray reports it. A try that timed out is cancelled. The last error is raised once the policy
gives up, so a search fails within the budget instead of hanging until the client gives up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from ray.exceptions import RayActorError
from ray.serve.handle import DeploymentResponse

from ragindex.errors import BackendUnavailable
from ragindex.router import FailoverPolicy, Fault, next_try

log = logging.getLogger("ragindex.serve")
Send = Callable[[], Any]  # sends a request: partial(handle.method.remote, *args)

# Query-path calls: a healthy replica answers in milliseconds; a loaded box can take seconds.
QUERY_FAILOVER = FailoverPolicy(try_timeout_s=5.0, budget_s=30.0)


def fault_of(error: BaseException) -> Fault:
    """How a failed try went wrong (errors raised inside a replica keep their own type)."""
    if isinstance(error, TimeoutError):
        return Fault.SLOW
    if isinstance(error, RayActorError):  # died, or its node is gone or unreachable
        return Fault.GONE
    if isinstance(error, grpc.RpcError):  # a call over gRPC lost on the way (Serve raises
        return Fault.GONE  # ActorUnavailableError, a RayActorError, for UNAVAILABLE only)
    if isinstance(error, BackendUnavailable):  # e.g. a new replica still opening its view
        return Fault.OPENING
    return Fault.REFUSED


def call(send: Send, policy: FailoverPolicy = QUERY_FAILOVER) -> Any:
    """The result of `send()`'s request, failed over per `policy` (see the module doc)."""
    return call_all([send], policy)[0]


def call_all(sends: Sequence[Send], policy: FailoverPolicy = QUERY_FAILOVER) -> list[Any]:
    """Every request's result: all first tries are in flight together (a fan-out), and each
    fails over on its own, within the one budget."""
    return [result for result, _ in call_all_timed(sends, policy)]


def call_all_timed(
    sends: Sequence[Send], policy: FailoverPolicy = QUERY_FAILOVER
) -> list[tuple[Any, float]]:
    """`call_all`, each result with the seconds from its first send until the caller had it
    (results are collected in the order sent)."""
    started = time.monotonic()
    first: list[tuple[DeploymentResponse[Any], float]] = [
        (send(), time.monotonic()) for send in sends
    ]
    out = []
    for send, sent in zip(sends, first, strict=True):
        result = _finish(send, sent, policy, started)
        out.append((result, time.monotonic() - sent[1]))
    return out


def _finish(
    send: Send,
    sent: tuple[DeploymentResponse[Any], float] | None,
    policy: FailoverPolicy,
    started: float,
) -> Any:
    fault: Fault | None = None
    last: Exception | None = None
    while True:
        attempt = next_try(policy, time.monotonic() - started, fault)
        if attempt is None:
            assert last is not None  # the first try always runs
            raise last
        if sent is None:
            time.sleep(attempt.pause_s)
            sent = (send(), time.monotonic())
        response, sent_at = sent
        try:  # the try's clock started when it was sent
            return response.result(
                timeout_s=max(0.0, attempt.timeout_s - (time.monotonic() - sent_at))
            )
        except Exception as error:  # classified: a refusal is raised again as it is
            if isinstance(error, TimeoutError):
                response.cancel()
            last, fault, sent = error, fault_of(error), None
            if fault is not Fault.REFUSED:
                log.warning("a replica call failed (%s), failing over: %s", fault.value, error)
