"""The node's metrics across real processes: what each records into the node directory is one
exposition (counters add up, a dead process's live gauges go), and one process of the node
serves it on the metrics port while another may not bind it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ragindex.netutil import free_port
from ragindex.telemetry.metrics import (
    QUERY_STAGES,
    _NodeCollector,
    exposition,
    observe_search,
    observe_view,
    remove_dead_node_dirs,
)

CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from ragindex.telemetry.metrics import instruments, observe_search, setup_process
    directory, role, port, hold = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    setup_process(role, directory, int(port) if port != "-" else None)
    observe_search("hybrid", {"embed": 2.0, "dense": 1.0, "not-a-stage": 5.0},
                   {"dense.shard0.round_trip": 3.0}, 7, role == "router")
    instruments().ingest_documents.inc(5)
    print("ready", flush=True)
    if hold == "hold":
        sys.stdin.read()  # until the test closes stdin
    """
)


@contextmanager
def child(directory: Path, role: str, port: int | None = None) -> Iterator[subprocess.Popen[str]]:
    """A process of the node that records and stays alive until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), role, str(port or "-"), "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


def node_text(directory: Path) -> str:
    return generate_latest(_NodeCollector(directory)).decode()


def test_a_node_is_one_exposition_of_all_its_processes(tmp_path: Path) -> None:
    with child(tmp_path, "router"), child(tmp_path, "ingest"):
        text = node_text(tmp_path)
        # counters and histograms of both processes add up
        assert value(text, "ragindex_ingest_documents_total") == 10
        assert value(text, "ragindex_query_stage_seconds_count", stage="embed") == 2
        assert value(text, "ragindex_query_stage_seconds_sum", stage="embed") == 0.004
        hop = {"hop": "dense.shard0", "part": "round_trip"}
        assert value(text, "ragindex_query_hop_seconds_count", **hop) == 2
        assert value(text, "ragindex_search_degraded_total", mode="hybrid") == 1
        # an unknown stage is no label
        assert "not-a-stage" not in text
        # each live process counts under its role, with its memory
        assert value(text, "ragindex_processes", role="router") == 1
        assert value(text, "ragindex_processes", role="ingest") == 1
        assert (value(text, "ragindex_process_resident_memory_bytes", role="ingest") or 0) > 1e6
    text = node_text(tmp_path)
    # both exited: what they counted stays, their live gauges go
    assert value(text, "ragindex_ingest_documents_total") == 10
    assert value(text, "ragindex_processes", role="router") is None


def test_one_process_of_the_node_serves_the_port(tmp_path: Path) -> None:
    port = free_port()
    with child(tmp_path, "shard", port), child(tmp_path, "lexical", port) as second:
        assert second.poll() is None  # the port was taken: the second process runs on
        deadline = time.monotonic() + 30
        while True:
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "nobody serves the metrics port"
                time.sleep(0.2)
        assert value(text, "ragindex_processes", role="shard") == 1
        assert value(text, "ragindex_processes", role="lexical") == 1
        assert value(text, "ragindex_ingest_documents_total") == 10


def test_in_memory_exposition_of_a_process_without_setup() -> None:
    before = value(exposition().decode(), "ragindex_query_stage_seconds_count", stage="fusion")
    observe_search("dense", {"fusion": 0.4}, {}, 3, False)
    text = exposition().decode()
    assert value(text, "ragindex_query_stage_seconds_count", stage="fusion") == (before or 0) + 1
    assert set(QUERY_STAGES) >= {"embed", "dense", "lexical", "fusion", "fetch", "rerank", "answer"}


def test_view_freshness_grows_while_behind_and_resets_when_current() -> None:
    observe_view("lexical", {0: 5}, current_at=100.0, ends={0: 5}, now=100.5)
    text = exposition().decode()
    assert value(text, "ragindex_view_applied_offset", view="lexical", partition="0") == 5
    assert value(text, "ragindex_view_end_offset", view="lexical", partition="0") == 5
    assert value(text, "ragindex_view_freshness_seconds", view="lexical", partition="0") == 0.5
    observe_view("lexical", {0: 6}, current_at=None, now=130.0)  # fell behind
    text = exposition().decode()
    assert value(text, "ragindex_view_freshness_seconds", view="lexical", partition="0") == 30.0
    assert value(text, "ragindex_view_applied_offset", view="lexical", partition="0") == 6
    observe_view("lexical", {0: 9}, current_at=131.0, now=131.25)
    text = exposition().decode()
    assert value(text, "ragindex_view_freshness_seconds", view="lexical", partition="0") == 0.25


def test_the_directories_of_stopped_nodes_are_removed(tmp_path: Path) -> None:
    stopped, running, mine, empty, other = (
        tmp_path / name for name in ("stopped", "running", "mine", "empty", "other")
    )
    with child(stopped, "router"):
        pass  # a node whose every process has exited
    with child(mine, "router"):
        pass  # this node's own directory is kept, live or not
    empty.mkdir()  # a node whose first process has not written yet
    other.mkdir()
    (other / "notes.txt").write_text("not a metrics file")
    with child(running, "shard"):
        assert remove_dead_node_dirs(tmp_path, keep=mine) == [stopped]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "mine", "other", "running"]
    assert remove_dead_node_dirs(tmp_path, keep=mine) == [running]
    assert remove_dead_node_dirs(tmp_path / "absent", keep=mine) == []
