"""Conditions, status transitions, rollout and the local-runtime decisions (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.operator import Verdict, desired_status, validate_spec
from ragindex.operator.__main__ import parse_args
from ragindex.operator.local_runtime import (
    local_endpoint,
    merge_application,
    render_local,
    serve_app_verdict,
    without_application,
)
from ragindex.operator.status import (
    find_condition,
    ray_service_verdict,
    rfc3339,
    set_condition,
    status_patch,
)

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found = find_condition(status["conditions"], type_)
    assert found is not None, f"no {type_} condition in {status}"
    return dict(found)


def test_rfc3339_is_utc_whole_seconds() -> None:
    moment = datetime(2026, 1, 1, 2, 3, 4, 500_000, tzinfo=timezone(timedelta(hours=2)))
    assert rfc3339(moment) == "2026-01-01T00:03:04Z"
    assert rfc3339(datetime(2026, 1, 1, tzinfo=UTC)) == T0


def test_transition_time_changes_only_when_status_flips() -> None:
    first = set_condition(
        [], "Ready", Verdict(False, "Progressing", "a"), observed_generation=1, now=T0
    )
    same = set_condition(
        first, "Ready", Verdict(False, "Other", "b"), observed_generation=2, now=T1
    )
    assert same[0]["lastTransitionTime"] == T0
    assert (same[0]["reason"], same[0]["message"], same[0]["observedGeneration"]) == (
        "Other",
        "b",
        2,
    )
    flipped = set_condition(same, "Ready", Verdict(True, "Serving"), observed_generation=2, now=T2)
    assert (flipped[0]["status"], flipped[0]["lastTransitionTime"]) == ("True", T2)
    unknown = set_condition(
        flipped, "Ready", Verdict(None, "Pending"), observed_generation=2, now=T2
    )
    assert unknown[0]["status"] == "Unknown"


def test_invalid_then_valid_spec() -> None:
    bad = desired_status(
        None, observed_generation=1, now=T0, reconcile=Verdict(False, "InvalidSpec", "fusion.topK")
    )
    assert bad["observedGeneration"] == 1
    assert cond(bad, "Reconciled")["status"] == "False"
    assert cond(bad, "Degraded") | {} == {
        "type": "Degraded",
        "status": "True",
        "reason": "InvalidSpec",
        "message": "fusion.topK",
        "lastTransitionTime": T0,
        "observedGeneration": 1,
    }
    assert cond(bad, "Ready")["status"] == "Unknown"
    assert bad["phase"] == "Degraded"
    assert [c["type"] for c in bad["conditions"]] == ["Ready", "Reconciled", "Degraded"]

    good = desired_status(
        bad,
        observed_generation=2,
        now=T1,
        reconcile=Verdict(True, "Applied"),
        serving=Verdict(False, "Progressing", "waiting"),
        endpoint="http://x/",
        active_generation=None,
    )
    assert good["observedGeneration"] == 2
    assert (cond(good, "Degraded")["status"], cond(good, "Degraded")["lastTransitionTime"]) == (
        "False",
        T1,
    )
    assert cond(good, "Ready")["lastTransitionTime"] == T1  # Unknown -> False is a flip
    assert good["phase"] == "Progressing"
    assert good["endpoint"] == "http://x/"
    assert "activeGeneration" not in good

    # A readiness check later: observedGeneration stays, Ready flips, Degraded keeps its time.
    ready = desired_status(
        good,
        observed_generation=2,
        now=T2,
        serving=Verdict(True, "Serving"),
        active_generation="g1",
    )
    assert ready["observedGeneration"] == 2
    assert cond(ready, "Ready")["lastTransitionTime"] == T2
    assert cond(ready, "Degraded")["lastTransitionTime"] == T1
    assert (ready["phase"], ready["activeGeneration"], ready["endpoint"]) == (
        "Ready",
        "g1",
        "http://x/",
    )
    assert status_patch(ready, ready) == {}
    assert set(status_patch(good, ready)) == {"conditions", "phase", "activeGeneration"}


def test_serving_failure_is_degraded() -> None:
    status = desired_status(
        None,
        observed_generation=3,
        now=T0,
        reconcile=Verdict(True, "Applied"),
        serving=Verdict(False, "ServeFailed", "import error"),
    )
    assert (cond(status, "Degraded")["reason"], cond(status, "Degraded")["message"]) == (
        "ServeFailed",
        "import error",
    )


def test_ray_service_verdict() -> None:
    assert ray_service_verdict(None, "rs").ok is False
    assert ray_service_verdict({"status": {}}, "rs").reason == "Progressing"
    v1 = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "x"}]}}
    assert ray_service_verdict(v1, "rs").ok is True
    assert ray_service_verdict({"status": {"serviceStatus": "Running"}}, "rs").ok is True
    waiting = {"status": {"conditions": [{"type": "Ready", "status": "False", "message": "init"}]}}
    assert "init" in ray_service_verdict(waiting, "rs").message


def test_validate_spec_messages() -> None:
    with pytest.raises(InvalidInput, match=r"fusion.candidates must be >= fusion.topK"):
        validate_spec("idx", {"fusion": {"candidates": 2, "topK": 5}}, "cluster")
    with pytest.raises(InvalidInput, match=r"extra_forbidden|Extra inputs"):
        validate_spec("idx", {"nope": 1}, "cluster")
    cluster = {"log": {"mode": "managed"}, "authSecret": "tokens"}
    managed = {**cluster, "lexical": {"backend": "elasticsearch"}}
    assert validate_spec("idx", managed, "cluster").lexical.backend == "elasticsearch"
    with pytest.raises(InvalidInput, match="managed Elasticsearch needs the cluster runtime"):
        validate_spec("idx", {"lexical": {"backend": "elasticsearch"}}, "local")
    with pytest.raises(InvalidInput, match="managed Kafka log needs the cluster runtime"):
        validate_spec("idx", {"log": {"mode": "managed"}}, "local")
    with pytest.raises(InvalidInput, match="storageSize"):
        validate_spec("idx", {**cluster, "storageSize": "1.5Gi"}, "cluster")
    # The cluster runtime needs a Kafka log and a token Secret; one machine needs neither.
    with pytest.raises(InvalidInput, match=r"needs log\.mode 'managed'"):
        validate_spec("idx", {"authSecret": "tokens"}, "cluster")
    with pytest.raises(InvalidInput, match="authSecret is required"):
        validate_spec("idx", {"log": {"mode": "managed"}}, "cluster")
    assert validate_spec("idx", {}, "local").log.mode == "embedded"


def app(name: str, route: str) -> dict[str, Any]:
    return {"name": name, "route_prefix": route, "import_path": "m:build_app"}


def details(**apps: tuple[str, str | None]) -> dict[str, Any]:
    """A GET /api/serve/applications/ answer with apps as name -> (status, route)."""
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "127.0.0.1", "port": 8000},
        "applications": {
            n: {
                "status": st,
                "message": f"{n} is {st}",
                "deployed_app_config": app(n, route) if route else None,
            }
            for n, (st, route) in apps.items()
        },
    }


def test_local_runtime_renders_one_routed_app() -> None:
    spec = RagIndexSpec.model_validate({})
    config = render_local("ns", "idx", spec, data_dir="/tmp/d", host="127.0.0.1", port=8123)
    ServeDeploySchema.model_validate(config)
    (application,) = config["applications"]
    assert (application["name"], application["route_prefix"]) == ("ns.idx", "/ns/idx")
    assert application["args"]["runtime"] == "local"
    assert config["http_options"] == {"host": "127.0.0.1", "port": 8123}
    assert local_endpoint("127.0.0.1", 8123, "ns", "idx") == "http://127.0.0.1:8123/ns/idx/"
    yaml.safe_dump(config)  # plain data all the way down


def test_merge_replaces_ours_and_keeps_the_others() -> None:
    ours = {
        "proxy_location": "EveryNode",
        "http_options": {},
        "applications": [app("ns.b", "/ns/b")],
    }
    current = details(**{"ns.a": ("RUNNING", "/ns/a"), "ns.b": ("RUNNING", "/old")})
    body = merge_application(current, ours)
    assert [a["name"] for a in body["applications"]] == ["ns.a", "ns.b"]
    assert body["applications"][1]["route_prefix"] == "/ns/b"
    assert merge_application(details(), ours)["applications"] == ours["applications"]

    removed = without_application(current, "ns.b")
    assert removed is not None
    assert [a["name"] for a in removed["applications"]] == ["ns.a"]
    assert without_application(current, "ns.zzz") is None


def test_serve_app_verdicts() -> None:
    d = details(
        **{
            "a": ("RUNNING", "/a"),
            "b": ("DEPLOYING", "/b"),
            "c": ("DEPLOY_FAILED", "/c"),
            "d": ("UNHEALTHY", "/d"),
        }
    )
    assert serve_app_verdict(d, "a").ok is True
    assert serve_app_verdict(d, "b").reason == "Progressing"
    assert serve_app_verdict(d, "c").reason == "ServeFailed"
    assert serve_app_verdict(d, "d").reason == "Unhealthy"
    assert serve_app_verdict(d, "missing").reason == "Progressing"


def test_cli_flags() -> None:
    options, args = parse_args(
        ["--runtime", "local", "--ray-dashboard", "http://127.0.0.1:9999", "-n", "a", "-n", "b"]
    )
    assert (options.runtime, options.ray_dashboard, args.namespace) == (
        "local",
        "http://127.0.0.1:9999",
        ["a", "b"],
    )
    options, args = parse_args(["-A", "--image", "reg/ragindex:1", "--poll-interval", "2"])
    assert (options.render.image, options.poll_interval_s, args.all_namespaces) == (
        "reg/ragindex:1",
        2.0,
        True,
    )
    options, _ = parse_args(
        ["-A", "--head-cpus", "1", "--cpu-worker-cpus", "8", "--ray-cpu-request", "100m"]
    )
    assert (options.render.head_cpus, options.render.cpu_worker_cpus) == (1, 8)
    assert options.render.ray_cpu_request == "100m"
    with pytest.raises(SystemExit):
        parse_args([])  # a scope is required


def test_identity_needs_no_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    # Found on a real pod: uid 65532 has no passwd entry, and kopf's default identity
    # (getpass.getuser) raised KeyError before the operator started.
    import getpass

    from ragindex.operator.__main__ import operator_identity

    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 65532")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert operator_identity().startswith("ragindex-operator@")


def test_standalone_names_no_peering() -> None:
    # Found on real pods: with a peering name kopf treats peering as mandatory and pauses every
    # watch ("peering CRD is missing") even when standalone, so nothing was ever reconciled.
    from ragindex.operator.__main__ import peering_args

    assert peering_args(None) == {"standalone": True, "peering_name": None}
    assert peering_args("ragindex") == {"standalone": False, "peering_name": "ragindex"}
