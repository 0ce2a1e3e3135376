"""The operator's promotion decision (pure): promote only a complete, checked generation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ragindex.generations import CHECKS, BuildReport
from ragindex.operator import Observed, Verdict, decide_promotion, desired_status
from ragindex.operator.status import find_condition, rfc3339

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = 3600.0
READY = Verdict(True, "Serving", "RayService is ready")
STARTING = Verdict(False, "Progressing", "waiting for RayService x-new: no status yet")
PASSED = {c: "" for c in CHECKS}


def seen(
    target: str,
    ready: Verdict = READY,
    report: BuildReport | None = None,
    at: datetime = T0,
    window_s: float = 24 * HOUR,
) -> Observed:
    return Observed(target, ready, report, rfc3339(at), at, window_s)


def status_after(prev: dict[str, Any], observed: Observed) -> dict[str, Any]:
    action = decide_promotion(prev, observed)
    return {"activeGeneration": action.active, "generations": action.generations}


def phase(status: dict[str, Any], generation: str) -> str:
    return next(e["phase"] for e in status["generations"] if e["id"] == generation)


def test_the_first_generation_serves_when_its_ray_service_is_ready() -> None:
    waiting = decide_promotion(None, seen("g1", STARTING))
    assert (waiting.kind, waiting.active, waiting.ready.ok) == ("wait", None, False)
    assert waiting.generations[0]["phase"] == "Backfilling"
    action = decide_promotion(None, seen("g1"))
    assert (action.kind, action.active) == ("promote", "g1")
    assert action.generations == [
        {
            "id": "g1",
            "createdAt": rfc3339(T0),
            "progress": "100%",
            "phase": "Serving",
            "since": rfc3339(T0),
            "reason": "",
        }
    ]


def test_a_ready_ray_service_alone_promotes_nothing() -> None:
    old = {"activeGeneration": "old"}
    for ready, report in [
        (STARTING, None),
        (READY, None),  # the app does not answer yet
        (READY, BuildReport("other", 10, 10, PASSED)),  # someone else's report
        (READY, BuildReport("new", 3, 10)),
    ]:
        action = decide_promotion(old, seen("new", ready, report))
        assert (action.kind, action.active) == ("wait", "old")
        assert (action.ready.ok, action.ready.reason) == (True, "PreviousGenerationServing")
        assert phase({"generations": action.generations}, "new") == "Backfilling"
        assert phase({"generations": action.generations}, "old") == "Serving"
    progress = decide_promotion(old, seen("new", report=BuildReport("new", 3, 10)))
    entry = next(e for e in progress.generations if e["id"] == "new")
    assert (entry["progress"], entry["reason"]) == ("30%", "3 of 10 docs records consumed")
    verifying = decide_promotion(old, seen("new", report=BuildReport("new", 10, 10)))
    assert phase({"generations": verifying.generations}, "new") == "Verifying"


def test_verifying_names_the_first_view_replicas_it_waits_on() -> None:
    behind = tuple(f"Shard{i} replica r{i}: applied p{i}@1 of p{i}@9" for i in range(5))
    report = BuildReport("new", 10, 10, waiting_on=behind)
    action = decide_promotion({"activeGeneration": "old"}, seen("new", report=report))
    entry = next(e for e in action.generations if e["id"] == "new")
    assert entry["phase"] == "Verifying"
    assert entry["reason"] == (
        "10 of 10 docs records consumed, waiting on Shard0 replica r0: applied p0@1 of p0@9;"
        " Shard1 replica r1: applied p1@1 of p1@9; Shard2 replica r2: applied p2@1 of p2@9;"
        " 2 more"
    )
    assert BuildReport.from_json(report.to_json()) == report


def test_complete_and_checked_promotes_and_retains_the_old_generation() -> None:
    prev = status_after({"activeGeneration": "old"}, seen("new", STARTING))
    created = prev["generations"][-1]["createdAt"]
    later = T0 + timedelta(minutes=5)
    action = decide_promotion(
        prev, seen("new", report=BuildReport("new", 10, 10, PASSED), at=later)
    )
    assert (action.kind, action.active, action.retire) == ("promote", "new", [])
    new = next(e for e in action.generations if e["id"] == "new")
    old = next(e for e in action.generations if e["id"] == "old")
    assert (new["phase"], new["createdAt"], new["since"]) == ("Serving", created, rfc3339(later))
    assert [c["passed"] for c in new["checks"]] == [True, True, True]
    assert (old["phase"], old["since"]) == ("Retained", rfc3339(later))


@pytest.mark.parametrize("failed", CHECKS)
def test_a_failed_check_keeps_the_old_generation_and_names_the_check(failed: str) -> None:
    checks = PASSED | {failed: "what went wrong"}
    report = BuildReport("new", 10, 10, checks)
    action = decide_promotion({"activeGeneration": "old"}, seen("new", report=report))
    assert (action.kind, action.active) == ("refuse", "old")
    entry = next(e for e in action.generations if e["id"] == "new")
    assert entry["phase"] == "Failed"
    assert failed in entry["reason"] and "what went wrong" in entry["reason"]
    assert [c["name"] for c in entry["checks"] if not c["passed"]] == [failed]
    # Degraded names the check; Ready stays True: the old generation serves.
    status = desired_status(
        {"activeGeneration": "old"},
        observed_generation=2,
        now=rfc3339(T0),
        serving=action.ready,
        active_generation=action.active,
        generations=action.generations,
    )
    degraded = find_condition(status["conditions"], "Degraded")
    assert degraded is not None and degraded["status"] == "True"
    assert degraded["reason"] == "GenerationCheckFailed" and failed in degraded["message"]
    assert find_condition(status["conditions"], "Ready")["status"] == "True"  # type: ignore[index]
    # Failed is final for that generation: a passing report later does not promote it.
    again = decide_promotion(status, seen("new", report=BuildReport("new", 10, 10, PASSED)))
    assert (again.kind, again.active) == ("refuse", "old")


def test_reverting_the_spec_inside_the_window_rolls_back_through_the_checks() -> None:
    prev = {"activeGeneration": "old"}
    promoted = status_after(prev, seen("new", report=BuildReport("new", 10, 10, PASSED)))
    assert promoted["activeGeneration"] == "new"
    # kubectl apply of the old spec: the retained generation is the target again.
    later = T0 + timedelta(hours=1)
    waiting = decide_promotion(promoted, seen("old", report=BuildReport("old", 11, 12), at=later))
    assert (waiting.kind, waiting.active) == ("wait", "new")
    back = decide_promotion(
        promoted, seen("old", report=BuildReport("old", 12, 12, PASSED), at=later)
    )
    assert (back.kind, back.active, back.retire) == ("promote", "old", [])
    assert phase({"generations": back.generations}, "new") == "Retained"


def test_retention_ends_with_the_window_and_abandoned_builds_are_retired() -> None:
    promoted = status_after(
        {"activeGeneration": "old"}, seen("new", report=BuildReport("new", 10, 10, PASSED))
    )
    inside = decide_promotion(promoted, seen("new", at=T0 + timedelta(hours=23)))
    assert (inside.kind, inside.retire) == ("hold", [])
    past = decide_promotion(promoted, seen("new", at=T0 + timedelta(hours=25)))
    assert past.retire == ["old"] and [e["id"] for e in past.generations] == ["new"]
    # A build the spec no longer names (edited again mid-backfill) is retired at once.
    building = status_after({"activeGeneration": "old"}, seen("b", STARTING))
    moved = decide_promotion(building, seen("c", STARTING))
    assert moved.retire == ["b"] and moved.active == "old"
