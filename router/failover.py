"""When a call to one replica of a deployment (a dense shard, the BM25 view, a model pool)
should be sent again, and how long each try may wait: a pure decision, no I/O.

A replica on a node that went away never answers (the call hangs until Ray declares it dead,
which can take longer than any client waits), a replica that just started may still be
opening, and Serve routes a new try to a replica it still believes alive, which after a node
loss is usually another one. So every try waits at most `try_timeout_s`, tries go on while
the call's `budget_s` lasts, and a request that is itself wrong is never retried.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Fault(enum.Enum):
    """What went wrong with the last try, as the caller classified it."""

    SLOW = "slow"  # no answer within the try's timeout
    GONE = "gone"  # the replica (or its node) died
    OPENING = "opening"  # the replica answered that it cannot serve yet
    REFUSED = "refused"  # the request itself was refused: another replica refuses it too


@dataclass(frozen=True)
class FailoverPolicy:
    try_timeout_s: float = 5.0
    budget_s: float = 30.0
    pause_s: float = 0.2  # after a dead or opening replica: let Serve's routing catch up
    min_try_s: float = 0.5  # a try shorter than this cannot succeed: give up instead

    def __post_init__(self) -> None:
        if not 0 < self.min_try_s <= self.try_timeout_s <= self.budget_s or self.pause_s < 0:
            raise ValueError(
                "failover needs 0 < min_try_s <= try_timeout_s <= budget_s and pause_s >= 0, "
                f"got {self}"
            )


@dataclass(frozen=True)
class Try:
    pause_s: float  # wait this long, then send the call again
    timeout_s: float  # and wait at most this long for its answer


def next_try(policy: FailoverPolicy, elapsed_s: float, fault: Fault | None) -> Try | None:
    """The next try of a call that has run `elapsed_s` so far (`fault` None: the first try),
    or None: give up and raise the last error."""
    if fault is Fault.REFUSED:
        return None
    pause = policy.pause_s if fault in (Fault.GONE, Fault.OPENING) else 0.0
    remaining = policy.budget_s - elapsed_s - pause
    if remaining < policy.min_try_s:
        return None
    return Try(pause_s=pause, timeout_s=min(policy.try_timeout_s, remaining))
