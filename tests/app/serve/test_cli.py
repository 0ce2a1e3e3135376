"""`ragindex serve`'s pure settings: the dashboard switch and port, and builder args."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragindex.app.serve import parse_args
from ragindex.app.serve_cli import (
    DASHBOARD_PORT,
    app_args,
    dashboard_enabled,
    dashboard_port,
    direct_ingress_environment,
    haproxy_ingress_environment,
    ingress_mode,
    ray_environment,
)
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.serve_config import HAPROXY_INGRESS_ENV


def test_replicas_run_at_normal_priority_only_in_the_embedded_runtime(tmp_path: Path) -> None:
    # Embedded: the replicas are the service. The one-machine cluster layout shares the box with
    # its Kafka broker, which Ray's default (15) keeps ahead of the replicas.
    assert ray_environment(tmp_path)["RAY_worker_niceness"] == "0"
    assert ray_environment(tmp_path, "cluster")["RAY_worker_niceness"] == "15"


def test_dashboard_port_defaults_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGINDEX_DASHBOARD_PORT", raising=False)
    assert dashboard_port() == DASHBOARD_PORT == 8265
    monkeypatch.setenv("RAGINDEX_DASHBOARD_PORT", "18265")
    assert dashboard_port() == 18265


@pytest.mark.parametrize("raw", ["abc", "0", "70000", ""])
def test_bad_dashboard_port_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("RAGINDEX_DASHBOARD_PORT", raw)
    with pytest.raises(InvalidInput, match="RAGINDEX_DASHBOARD_PORT"):
        dashboard_port()


def test_the_dashboard_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGINDEX_DASHBOARD", raising=False)
    assert not dashboard_enabled()
    monkeypatch.setenv("RAGINDEX_DASHBOARD", "1")
    assert dashboard_enabled()
    monkeypatch.setenv("RAGINDEX_DASHBOARD", "yes")
    with pytest.raises(InvalidInput, match="RAGINDEX_DASHBOARD must be 0 or 1"):
        dashboard_enabled()


def test_cli_args_are_what_the_builder_accepts(tmp_path: Path) -> None:
    spec = RagIndexSpec.model_validate({"dense": {"shards": 3}})
    parsed = parse_args(app_args(tmp_path, spec.model_dump(mode="json", by_alias=True)))
    assert (parsed.runtime, parsed.data_dir, parsed.spec.dense.shards) == ("local", tmp_path, 3)
    with pytest.raises(InvalidInput, match="unknown app args"):
        parse_args({**app_args(tmp_path, {}), "tenant": "x"})


def test_one_local_router_is_served_directly_several_by_the_proxy_the_cluster_by_haproxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAGINDEX_DIRECT_INGRESS", raising=False)
    assert [ingress_mode("local", 1), ingress_mode("local", 2)] == ["direct", "proxy"]
    assert ingress_mode("cluster", 1) == ingress_mode("cluster", 4) == "haproxy"
    monkeypatch.setenv("RAGINDEX_DIRECT_INGRESS", "0")
    assert ingress_mode("local", 1) == ingress_mode("cluster", 2) == "proxy"
    monkeypatch.setenv("RAGINDEX_DIRECT_INGRESS", "1")
    assert ingress_mode("local", 1) == "direct"
    assert ingress_mode("cluster", 2) == "haproxy"
    with pytest.raises(InvalidInput, match=r"dense\.replicas"):
        ingress_mode("local", 2)
    monkeypatch.setenv("RAGINDEX_DIRECT_INGRESS", "yes")
    with pytest.raises(InvalidInput, match="must be 0 or 1"):
        ingress_mode("cluster", 1)


def test_haproxy_ingress_is_the_pods_setting_with_a_short_drain_on_one_machine() -> None:
    env = haproxy_ingress_environment()
    assert env.items() >= HAPROXY_INGRESS_ENV.items()
    assert env["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"] == "1"


def test_direct_ingress_allocates_exactly_the_documented_port() -> None:
    env = direct_ingress_environment(18000)
    # Ray allocates from range(MIN, MAX): the one port asked for
    assert (
        env["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"],
        env["RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"],
    ) == ("18000", "18001")
    assert env["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1"
