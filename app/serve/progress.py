"""Where the cluster's view replicas report the chunk offsets they applied (router.applied).

`ProgressRegistry` is a small named Ray actor per application and generation (no CPU), made by
whichever replica needs it first, detached from it (it outlives the replica that made it) and
restarted by Ray if its node goes. Every Shard<i> and Lexical replica reports after each
catch-up (`ProgressReporter`: when its offsets change, and at least every REPORT_EVERY_S as a
heartbeat), under its Serve replica id. The Router's `?wait=true` reads the reports and asks
Serve how many replicas each view runs. A registry lost with its node is made again by the
next reports, and is full again within REPORT_EVERY_S; until then a wait keeps waiting.
Ingest replicas report here too (view "Ingest": the `docs` partitions each owns, with their
committed offsets), which no wait reads: it shows from outside who consumes what.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray

from ragindex.router import ViewReport

log = logging.getLogger("ragindex.serve")

REPORT_EVERY_S = 0.5
STALE_S = 3.0  # several heartbeats: a replica silent for longer is not counted as caught up
RAY_NAMESPACE = "ragindex"


class ProgressRegistry:
    """The latest report of every view replica, with when it came."""

    def __init__(self) -> None:
        self._reports: dict[tuple[str, str], tuple[dict[int, int], float]] = {}

    def report(self, view: str, replica: str, offsets: dict[int, int]) -> None:
        self._reports[(view, replica)] = (offsets, time.monotonic())

    def reports(self) -> list[ViewReport]:
        now = time.monotonic()
        return [
            ViewReport(view, replica, offsets, now - at)
            for (view, replica), (offsets, at) in self._reports.items()
        ]


def registry(app: str, generation: str) -> Any:
    """The application's registry actor, made if absent."""
    return (
        ray.remote(ProgressRegistry)
        .options(
            name=f"progress.{app}.{generation}",
            namespace=RAY_NAMESPACE,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            num_cpus=0,
        )
        .remote()
    )


def this_replica() -> tuple[str, str]:
    """(application name, this replica's id within its deployment) inside a Serve replica."""
    from ray import serve

    replica_id = serve.get_replica_context().replica_id
    return replica_id.deployment_id.app_name, replica_id.unique_id


class ProgressReporter:
    """Reports one view replica's applied offsets (called on its worker thread)."""

    def __init__(self, view: str, generation: str) -> None:
        self.view = view
        self.generation = generation
        self._last: dict[int, int] | None = None
        self._sent_at = 0.0

    def report(self, offsets: Mapping[int, int]) -> None:
        now = time.monotonic()
        if dict(offsets) == self._last and now - self._sent_at < REPORT_EVERY_S:
            return
        try:
            app, replica = this_replica()
            registry(app, self.generation).report.remote(self.view, replica, dict(offsets))
        except Exception as err:  # reporting never stops serving; waits just wait longer
            log.warning("could not report %s's progress: %s", self.view, err)
            return
        self._last, self._sent_at = dict(offsets), now


Running = dict[str, set[str]]  # deployment -> ids of its running replicas


def running_replicas(app: str, views: list[str]) -> Running:
    """The ids of the replicas Serve runs for each of `views` (deployments of `app`), from the
    controller's instance details, which `serve.status()` reduces to counts."""
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ReplicaState, ServeInstanceDetails

    client = _get_global_client()
    assert client is not None  # inside a Serve replica the controller runs
    details = ServeInstanceDetails(**client.get_serve_details())
    deployments = details.applications[app].deployments
    return {
        view: {r.replica_id for r in deployments[view].replicas if r.state == ReplicaState.RUNNING}
        for view in views
        if view in deployments
    }


class RunningReplicasCache:
    """`running_replicas`, asked again only once `max_age_s` old (or for other deployments):
    the controller takes ~70 ms to answer, which a `?wait=true` polling every 20 ms would pay
    as its last step every time; asked on its first poll instead, while the views still apply.
    A replica started since is not counted (it catches up to the end of the log before its
    first search); one stopped since is, until the next ask."""

    def __init__(
        self,
        max_age_s: float,
        ask: Callable[[str, list[str]], Running] = running_replicas,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_age_s = max_age_s
        self._ask = ask
        self._clock = clock
        self._asked: tuple[float, str, list[str], Running] | None = None

    def get(self, app: str, views: list[str]) -> Running:
        now = self._clock()
        last = self._asked
        if last is None or (app, views) != last[1:3] or now - last[0] > self.max_age_s:
            last = self._asked = (now, app, list(views), self._ask(app, views))
        return last[3]
