"""The embedded runtime with the ONNX int8 encoder: it serves hybrid search over HTTP, and no
process of the runtime (Router, Ingest, Ray's own) loads torch."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from ragindex.app import runtime_memory
from ragindex.router import create_token

if TYPE_CHECKING:  # fixtures come from conftest.py; pytest's importlib mode cannot import it
    from conftest import ServedApp

pytestmark = [pytest.mark.serve, pytest.mark.slow]

DOCS = [
    {
        "source": "wiki",
        "doc_id": "lighthouse",
        "title": "Lighthouses",
        "text": "A lighthouse is a tower with a bright lamp that guides ships at night.",
    },
    {
        "source": "wiki",
        "doc_id": "volcano",
        "title": "Volcanoes",
        "text": "A volcano is a rupture in the crust where lava, ash and gases escape.",
    },
]


def test_hybrid_search_with_the_int8_encoder_and_no_torch(onnx_served: ServedApp) -> None:
    token = create_token(onnx_served.data_dir, "alpha")
    with onnx_served.client(token) as client:
        r = client.post(
            "/v1/documents", json={"documents": DOCS}, params={"wait": "true", "wait_timeout_s": 60}
        )
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
        r = client.post("/v1/search", json={"query": "tower guiding ships", "k": 2})
        assert r.status_code == 200, r.text
        assert r.json()["hits"][0]["doc_id"] == "lighthouse"
    memory = runtime_memory(os.getpid(), include_root=False)  # the test process is not it
    roles = {row["role"]: row for row in memory["processes"]}
    replicas = [role for role in roles if "Router" in role or "Ingest" in role]
    assert len(replicas) >= 2, roles
    assert memory["processes_with_torch"] == 0, [r for r in roles.values() if r["torch"]]
    assert memory["rss_mib"] >= memory["pss_mib"] > 0
