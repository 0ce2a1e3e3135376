"""`ragindex serve`'s pure settings: dashboard port and builder args."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragindex.app.serve import parse_args
from ragindex.app.serve_cli import DASHBOARD_PORT, app_args, dashboard_port
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput


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


def test_cli_args_are_what_the_builder_accepts(tmp_path: Path) -> None:
    spec = RagIndexSpec.model_validate({"dense": {"shards": 3}})
    parsed = parse_args(app_args(tmp_path, spec.model_dump(mode="json", by_alias=True)))
    assert (parsed.runtime, parsed.data_dir, parsed.spec.dense.shards) == ("local", tmp_path, 3)
    with pytest.raises(InvalidInput, match="unknown app args"):
        parse_args({**app_args(tmp_path, {}), "tenant": "x"})
