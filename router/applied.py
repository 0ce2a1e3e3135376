"""Read-your-writes in the cluster: has every replica of every view applied a write? Pure.

Each replica of a view (a `Shard<i>` replica: its partition of `chunks.<generation>`; a
`Lexical` replica: every partition) reports the chunk offsets it applied, under its own
replica id, to a registry that stamps each report's age. A write is applied everywhere once,
for every view, each replica Serve runs (by id, so that the fresh report of a replica that
just died cannot stand in for its replacement) and at least one in all sent a recent report
(at most `stale_s` old) at or past the write's offsets. A replica that cannot report (stuck,
its node gone) keeps the wait waiting, bounded by the caller's timeout; one that starts
later catches up to the end of the log before it answers its first search.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass


@dataclass(frozen=True)
class ViewReport:
    view: str  # the deployment: "Shard0", ..., "Lexical"
    replica: str  # the Serve replica's id
    offsets: Mapping[int, int]  # partition -> the offset after the last record it applied
    age_s: float  # how long ago the registry received it


def views_behind(
    reports: Sequence[ViewReport],
    running: Mapping[str, Set[str]],
    targets: Mapping[str, Mapping[int, int]],
    stale_s: float,
) -> list[str]:
    """What keeps a write from being applied everywhere, one line per view replica (empty: it
    is): for every view in `targets` (view -> partition -> offset to reach), every replica id in
    `running[view]`, and at least one replica, must have reported recently having applied every
    one of its target offsets. The lines name views, replica ids and offsets only."""
    behind: list[str] = []
    for view, wanted in targets.items():
        latest: dict[str, ViewReport] = {}
        for r in reports:
            if r.view == view and (r.replica not in latest or r.age_s < latest[r.replica].age_s):
                latest[r.replica] = r
        caught_up = {
            replica
            for replica, r in latest.items()
            if r.age_s <= stale_s and all(r.offsets.get(p, 0) >= o for p, o in wanted.items())
        }
        expected = set(running.get(view, set()))
        if not expected and not caught_up:
            behind.append(f"{view}: no replica reported")
        for replica in sorted(expected - caught_up):
            last = latest.get(replica)
            if last is None:
                behind.append(f"{view} replica {replica}: no report yet")
            elif last.age_s > stale_s:
                behind.append(f"{view} replica {replica}: silent for {last.age_s:.0f} s")
            else:
                behind.append(
                    f"{view} replica {replica}: applied {_offsets(last.offsets, wanted)}"
                    f" of {_offsets(wanted, wanted)}"
                )
    return behind


def _offsets(offsets: Mapping[int, int], partitions: Mapping[int, int]) -> str:
    return ", ".join(f"p{p}@{offsets.get(p, 0)}" for p in sorted(partitions))
