"""Read-your-writes over every replica of every view (pure: no servers): `views_behind` is
empty once every running replica applied the write."""

from __future__ import annotations

from ragindex.router import ViewReport, views_behind

TARGETS = {"Shard0": {0: 5}, "Shard1": {1: 3}, "Lexical": {0: 5, 1: 3}}
RUNNING = {"Shard0": {"a", "b"}, "Shard1": {"c", "d"}, "Lexical": {"e"}}
STALE_S = 3.0


def everyone(age_s: float = 0.1) -> list[ViewReport]:
    return [
        ViewReport("Shard0", "a", {0: 5}, age_s),
        ViewReport("Shard0", "b", {0: 7}, age_s),
        ViewReport("Shard1", "c", {1: 3}, age_s),
        ViewReport("Shard1", "d", {1: 3}, age_s),
        ViewReport("Lexical", "e", {0: 5, 1: 4}, age_s),
    ]


def test_applied_once_every_running_replica_reported_the_offsets() -> None:
    assert views_behind(everyone(), RUNNING, TARGETS, STALE_S) == []


def test_one_replica_behind_keeps_the_write_unapplied() -> None:
    reports = everyone()
    reports[1] = ViewReport("Shard0", "b", {0: 4}, 0.1)
    assert views_behind(reports, RUNNING, TARGETS, STALE_S)


def test_the_bm25_view_must_have_every_partition() -> None:
    reports = [*everyone()[:4], ViewReport("Lexical", "e", {0: 5, 1: 2}, 0.1)]
    assert views_behind(reports, RUNNING, TARGETS, STALE_S)


def test_a_running_replica_that_never_reported_keeps_it_unapplied() -> None:
    assert views_behind(everyone()[1:], RUNNING, TARGETS, STALE_S)
    assert views_behind(everyone(), {**RUNNING, "Lexical": {"e", "f"}}, TARGETS, STALE_S)


def test_a_dead_replicas_fresh_report_does_not_stand_in_for_its_replacement() -> None:
    replaced = {**RUNNING, "Shard1": {"c", "d2"}}  # d died just now; d2 has not reported yet
    assert views_behind(everyone(), replaced, TARGETS, STALE_S)


def test_stale_reports_do_not_count() -> None:
    assert views_behind(everyone(age_s=STALE_S + 1), RUNNING, TARGETS, STALE_S)


def test_two_reports_of_one_replica_count_once() -> None:
    reports = [r for r in everyone() if r.replica != "b"]
    reports.append(ViewReport("Shard0", "a", {0: 6}, 0.05))
    assert views_behind(reports, RUNNING, TARGETS, STALE_S)


def test_a_view_with_no_running_replica_still_needs_one_report() -> None:
    assert views_behind(everyone()[:4], {**RUNNING, "Lexical": set()}, TARGETS, STALE_S)


def test_each_line_names_the_replica_and_why_it_holds_the_write_back() -> None:
    reports = [r for r in everyone() if r.replica not in ("b", "e")]
    reports[0] = ViewReport("Shard0", "a", {0: 4}, 0.1)
    reports.append(ViewReport("Lexical", "e", {0: 5, 1: 4}, STALE_S + 9))
    assert views_behind(reports, RUNNING, TARGETS, STALE_S) == [
        "Shard0 replica a: applied p0@4 of p0@5",
        "Shard0 replica b: no report yet",
        "Lexical replica e: silent for 12 s",
    ]
    assert views_behind([], {}, {"Lexical": {0: 1}}, STALE_S) == ["Lexical: no replica reported"]
