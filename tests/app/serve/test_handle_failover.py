"""How a failed handle call is classified, which decides whether it is tried again elsewhere."""

from __future__ import annotations

import grpc
import pytest
from ray.exceptions import ActorUnavailableError

from ragindex.app.serve.handle_failover import fault_of
from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.router import Fault


def lost_call(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "socket closed")


@pytest.mark.parametrize(
    ("error", "fault"),
    [
        (TimeoutError(), Fault.SLOW),
        (ActorUnavailableError("Actor is unavailable.", None), Fault.GONE),
        # over gRPC Serve turns only UNAVAILABLE into ActorUnavailableError: a call cut off
        # otherwise is lost on the way too, and another replica may answer it
        (lost_call(grpc.StatusCode.CANCELLED), Fault.GONE),
        (lost_call(grpc.StatusCode.INTERNAL), Fault.GONE),
        (BackendUnavailable("shard 0 is still opening"), Fault.OPENING),
        (InvalidInput("k must be an integer in 1..100"), Fault.REFUSED),
    ],
)
def test_each_failure_is_classified_for_failover(error: BaseException, fault: Fault) -> None:
    assert fault_of(error) is fault
