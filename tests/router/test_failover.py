"""The failover decision for calls to a deployment's replicas (pure: no servers)."""

from __future__ import annotations

import pytest

from ragindex.router import FailoverPolicy, Fault, next_try
from ragindex.router.failover import Try

POLICY = FailoverPolicy(try_timeout_s=5.0, budget_s=12.0, pause_s=0.2, min_try_s=0.5)


def test_the_first_try_waits_one_try_timeout() -> None:
    assert next_try(POLICY, 0.0, None) == Try(pause_s=0.0, timeout_s=5.0)


def test_a_slow_replica_is_tried_again_at_once() -> None:
    assert next_try(POLICY, 5.0, Fault.SLOW) == Try(pause_s=0.0, timeout_s=5.0)


@pytest.mark.parametrize("fault", [Fault.GONE, Fault.OPENING])
def test_a_dead_or_opening_replica_pauses_before_the_next_try(fault: Fault) -> None:
    assert next_try(POLICY, 1.0, fault) == Try(pause_s=0.2, timeout_s=5.0)


def test_the_last_try_gets_what_is_left_of_the_budget() -> None:
    assert next_try(POLICY, 10.0, Fault.SLOW) == Try(pause_s=0.0, timeout_s=2.0)
    assert next_try(POLICY, 10.0, Fault.GONE) == Try(pause_s=0.2, timeout_s=pytest.approx(1.8))


def test_it_gives_up_when_too_little_budget_is_left() -> None:
    assert next_try(POLICY, 11.6, Fault.SLOW) is None
    assert next_try(POLICY, 11.4, Fault.GONE) is None  # the pause eats what a try needs
    assert next_try(POLICY, 30.0, Fault.SLOW) is None


def test_a_refused_request_is_never_sent_again() -> None:
    assert next_try(POLICY, 0.0, Fault.REFUSED) is None


def test_the_number_of_tries_is_bounded_by_the_budget() -> None:
    elapsed, tries = 0.0, 0
    fault: Fault | None = None
    while (attempt := next_try(POLICY, elapsed, fault)) is not None:
        tries += 1
        elapsed += attempt.pause_s + attempt.timeout_s  # every try times out
        fault = Fault.SLOW
    assert tries == 3 and elapsed <= POLICY.budget_s


@pytest.mark.parametrize(
    "bad",
    [
        {"try_timeout_s": 0.0},
        {"try_timeout_s": 10.0, "budget_s": 5.0},
        {"min_try_s": 6.0},
        {"pause_s": -1.0},
    ],
)
def test_an_inconsistent_policy_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="failover needs"):
        FailoverPolicy(**bad)
