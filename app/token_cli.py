"""`ragindex token create | list | revoke`: the token file is `<data-dir>/tokens.json`.

The commands themselves are `ragindex.router.token_tool`'s (standard library only), so the
full install and the small one (`python -m ragindex.router.token_tool --file ...`) behave alike.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ragindex.router import tokens_path
from ragindex.router.token_tool import run


def token_command(args: argparse.Namespace) -> int:
    return run(args, tokens_path(Path(args.data_dir).resolve()))
