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


def every_replica_applied(
    reports: Sequence[ViewReport],
    running: Mapping[str, Set[str]],
    targets: Mapping[str, Mapping[int, int]],
    stale_s: float,
) -> bool:
    """Whether, for every view in `targets` (view -> partition -> offset to reach), every
    replica id in `running[view]`, and at least one replica, reported recently having applied
    every one of its target offsets."""
    for view, wanted in targets.items():
        caught_up = {
            r.replica
            for r in reports
            if r.view == view
            and r.age_s <= stale_s
            and all(r.offsets.get(p, 0) >= offset for p, offset in wanted.items())
        }
        if not caught_up or not running.get(view, set()) <= caught_up:
            return False
    return True
