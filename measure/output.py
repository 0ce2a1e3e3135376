"""Where measurement reads and writes its results: JSON files, written atomically."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragindex.errors import InvalidInput
from ragindex.router.cli_output import emit_json


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    """`--json FILE`: the report to FILE (or `-`, standard output), as every command does."""
    emit_json(path, payload)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InvalidInput(f"{path} does not exist") from None
    except json.JSONDecodeError as err:
        raise InvalidInput(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path} must hold a JSON object")
    return data
