"""The one `--json` convention of every `ragindex` command (standard library only).

`--json FILE` writes the command's result as JSON to FILE; `-` writes it to standard output.
Commands whose output is the result itself (`search`, `token create`, `token list`) take a bare
`--json` as `-`: JSON on standard output instead of text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

STDOUT = "-"


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """`--json [FILE]`: a bare `--json` is standard output."""
    parser.add_argument(
        "--json",
        nargs="?",
        const=STDOUT,
        metavar="FILE",
        help="print the result as JSON instead of text, or write it to FILE",
    )


def emit_json(
    target: str | Path, payload: Any, stdout: TextIO | None = None, private: bool = False
) -> None:
    """Write `payload` to `target` (STDOUT: standard output); a file is replaced whole (a
    temporary file, then a rename) and named on stderr; `private` (a secret inside) makes it
    readable by its owner only."""
    text = json.dumps(payload, indent=2) + "\n"
    if str(target) == STDOUT:
        (stdout or sys.stdout).write(text)
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(
        os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666), "w"
    ) as f:
        f.write(text)
    tmp.replace(path)
    print(f"wrote {path}", file=sys.stderr)
