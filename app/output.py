"""Where the CLI writes its results: JSON files, written atomically."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    """Write `payload` as indented JSON to path (folders made, temp file then rename), and say
    so on stderr."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(path)
    print(f"wrote {path}", file=sys.stderr)
