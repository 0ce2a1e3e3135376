"""What every Serve replica does first: record its metrics where its node's exposition reads
them, and log in the chosen format under its replica id (ragindex.telemetry)."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path

from ragindex.telemetry import configure_logging, remove_dead_node_dirs, setup_process
from ragindex.telemetry_names import METRICS_DIR_ENV


def node_metrics_dir() -> Path:
    """This Ray node's metrics directory: `RAGINDEX_METRICS_DIR`, else one per node id under
    the temporary directory (a pod's container filesystem, or this machine's /tmp), so that a
    restarted node, or a second node on one machine, starts from nothing."""
    import ray

    base = os.environ.get(METRICS_DIR_ENV) or str(Path(tempfile.gettempdir()) / "ragindex-metrics")
    return Path(base) / ray.get_runtime_context().get_node_id()


def replica_name() -> str | None:
    """`<deployment>#<id>` of the Serve replica this runs in (None outside one)."""
    with contextlib.suppress(Exception):
        from ray import serve

        replica = serve.get_replica_context().replica_id
        return f"{replica.deployment_id.name}#{replica.unique_id}"
    return None


def setup_replica(role: str) -> None:
    """Metrics into the node's directory (and the pod's metrics port, where the operator set
    one), after removing the directories of nodes that have stopped, so that runs do not pile
    them up under the temporary directory; `ragindex.*` logs as JSON or text with this
    replica's name. Never fails a replica."""
    try:
        configure_logging(replica=replica_name() or role, logger="ragindex")
    except Exception:  # a bad RAGINDEX_LOG_FORMAT: say so in the default format
        logging.getLogger("ragindex.serve").exception("logging setup failed")
    try:
        directory = node_metrics_dir()
        with contextlib.suppress(OSError):  # a leftover that cannot go never stops the metrics
            remove_dead_node_dirs(directory.parent, keep=directory)
        setup_process(role, directory)
    except Exception:
        logging.getLogger("ragindex.serve").exception("metrics setup failed")
