"""Where measurement reads and writes its results: JSON files, written atomically."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragindex.errors import InvalidInput


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    """Write `payload` as indented JSON to path (folders made, temp file then rename), and say
    so on stderr."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(path)
    print(f"wrote {path}", file=sys.stderr)


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
