"""Tokens against a real running server over real HTTP, with two Router replicas: a minted
token works from the first request after `ragindex token create` returns, a revoked one is
refused from the first request after `ragindex token revoke` returns, an expired one from its
expiry on, each on every replica (each stats the token file on every request)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from ragindex.config import RagIndexSpec

from .conftest import ServedApp, local_app

pytestmark = pytest.mark.serve

# Sequential requests, each routed to one of two idle replicas at random: 24 of them reach
# both with probability 1 - 2^-23.
PER_CHECK = 24


@pytest.fixture(scope="module")
def two_routers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    spec = RagIndexSpec.model_validate({"dense": {"shards": 1, "replicas": 2}})
    with local_app(tmp_path_factory.mktemp("token-serve-data"), spec) as app:
        yield app


def ragindex(*args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, in its own process, as an operator would run it beside the server."""
    done = subprocess.run(
        [sys.executable, "-m", "ragindex.app.cli", "token", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def statuses(http: httpx.Client, token: str) -> list[tuple[int, str]]:
    answers = []
    for _ in range(PER_CHECK):
        response = http.get("/v1/stats", headers={"Authorization": f"Bearer {token}"})
        answers.append((response.status_code, response.json().get("detail", "")))
    return answers


def test_create_and_revoke_count_from_the_next_request_on_every_replica(
    two_routers: ServedApp,
) -> None:
    data = ["--data-dir", str(two_routers.data_dir)]
    with two_routers.client() as http:
        made = json.loads(ragindex("create", "--tenant", "acme", "--json", *data).stdout)
        assert {status for status, _ in statuses(http, made["token"])} == {200}
        started = time.monotonic()
        ragindex("revoke", made["id"], *data)
        returned = time.monotonic()
        refused = statuses(http, made["token"])
        print(
            f"revoke: command {returned - started:.2f} s, then {PER_CHECK} requests in"
            f" {time.monotonic() - returned:.2f} s, the first already 401"
        )
        assert {status for status, _ in refused} == {401}
        assert {detail for _, detail in refused} == {"missing or unknown bearer token"}
        # An unknown token is refused alike; a token minted meanwhile still works.
        other = json.loads(ragindex("create", "--tenant", "acme", "--json", *data).stdout)
        assert {status for status, _ in statuses(http, other["token"])} == {200}


def test_an_expired_token_gets_401_with_its_reason_from_its_expiry_on(
    two_routers: ServedApp,
) -> None:
    data = ["--data-dir", str(two_routers.data_dir)]
    made = json.loads(
        ragindex("create", "--tenant", "acme", "--expires-in", "8s", "--json", *data).stdout
    )
    expires = datetime.fromisoformat(made["expires"])
    with two_routers.client() as http:
        assert datetime.now(UTC) < expires
        before = statuses(http, made["token"])
        if datetime.now(UTC) < expires:  # the whole check ran before the expiry
            assert {status for status, _ in before} == {200}
        time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()))
        after = statuses(http, made["token"])
        assert {status for status, _ in after} == {401}
        assert {detail for _, detail in after} == {
            f"bearer token {made['id']} expired at {made['expires']}: mint a new one"
        }
