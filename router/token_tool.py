"""Mint, list and revoke API tokens in a `tokens.json` with only Python and the standard library.

    python -m ragindex.router.token_tool --file tokens.json create --tenant acme --expires-in 30d
    python -m ragindex.router.token_tool --file tokens.json list
    python -m ragindex.router.token_tool --file tokens.json revoke 3f9c2a7b1d04

It imports neither torch, FAISS, Ray nor pydantic (an import-linter contract keeps it so), so
it runs in the operator image, or anywhere after `pip install --no-deps` of the repository:
on Kubernetes, the file is the `tokens.json` key of the RagIndex's `authSecret` (see
docs/kubernetes.md). `--file -` reads the file from stdin and writes the new file to stdout,
with the token (for `create`) on stderr, for use through `kubectl exec -i`. The same commands
are `ragindex token ...` on a full install, where the file is `<data-dir>/tokens.json`.

Bad input (a malformed tenant, principal or expiry, an unknown id) prints one line and exits 2
with nothing changed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from ragindex.errors import RagIndexError
from ragindex.router.auth import (
    IssuedToken,
    TokenRecord,
    expiry,
    issue_in_text,
    issue_token,
    list_in_text,
    list_tokens,
    revoke_in_text,
    revoke_token,
    rfc3339,
)
from ragindex.router.cli_output import add_json_option, emit_json

STDIO = "-"
PROPAGATION_NOTE = (
    "a server reading this file refuses it from its next request (on Kubernetes, once the"
    " kubelet has updated the mounted Secret: within about a minute and a half)"
)


def add_token_commands(
    tokens: argparse._SubParsersAction[argparse.ArgumentParser],
) -> list[argparse.ArgumentParser]:
    """`create`, `list` and `revoke` under a `token` command (shared by `ragindex token` and
    this module's own parser; its `dest` must be `token_command`); returns their parsers."""
    made: list[argparse.ArgumentParser] = []
    t = tokens.add_parser("create", help="mint a token bound to one tenant and its principals")
    t.add_argument("--tenant", required=True)
    t.add_argument(
        "--principal",
        action="append",
        default=[],
        help="user:<name>, group:<name> or role:<name> the token reads as (repeatable); without"
        " any, the token reads only documents that have no ACL",
    )
    when = t.add_mutually_exclusive_group()
    when.add_argument(
        "--expires-in",
        metavar="DURATION",
        help="lifetime: a number and a unit s, m, h, d or w, or a sum (30d, 12h, 1d12h);"
        " default: never expires",
    )
    when.add_argument(
        "--expires-at",
        metavar="RFC3339",
        help="expiry as an RFC 3339 date-time with an offset (2027-01-31T00:00:00Z)",
    )
    t.add_argument("--name", help="a short label shown by `list` (1-63 of A-Z a-z 0-9 . _ -)")
    t.add_argument("--description", help="free text shown by `list --json` (256 characters)")
    add_json_option(t)  # the token and its record as one JSON object
    made.append(t)

    t = tokens.add_parser("list", help="list tokens: id, tenant, principals, created, expiry")
    add_json_option(t)  # a JSON array of the records
    made.append(t)

    t = tokens.add_parser("revoke", help="remove a token by its id (from `list`)")
    t.add_argument("id", help="the token's id, e.g. 3f9c2a7b1d04")
    made.append(t)
    return made


def _describe(record: TokenRecord) -> str:
    principals = ", ".join(record.principals) or "none: documents without an ACL only"
    expires = f"expires {rfc3339(record.expires)}" if record.expires else "never expires"
    return f"token {record.id} for tenant {record.tenant!r}, principals {principals}, {expires}"


def _issued_json(issued: IssuedToken) -> dict[str, object]:
    return {**issued.record.to_json(), "token": issued.token}


def table(records: Sequence[TokenRecord], now: datetime | None = None) -> str:
    """The `list` table: one row per token, no secret and no digest."""
    now = now or datetime.now(UTC)
    rows = [["ID", "TENANT", "PRINCIPALS", "CREATED", "EXPIRES", "NAME"]]
    for record in records:
        expires = rfc3339(record.expires) if record.expires else "never"
        if record.expired(now):
            expires += " (expired)"
        rows.append(
            [
                record.id,
                record.tenant,
                ",".join(record.principals) or "-",
                rfc3339(record.created) if record.created else "-",
                expires,
                record.name or "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def run(
    args: argparse.Namespace,
    path: Path | str,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """One token command on the file at `path` (`-`: stdin to stdout); raises RagIndexError
    on bad input, having changed nothing."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    stdio = str(path) == STDIO
    try:
        if args.token_command == "create":
            expires = expiry(args.expires_in, args.expires_at)
            options = {"expires": expires, "name": args.name, "description": args.description}
            if stdio:
                text, issued = issue_in_text(
                    stdin.read(), args.tenant, args.principal, where="stdin", **options
                )
                stdout.write(text)  # the file; the token goes to stderr (or --json FILE)
                if args.json:
                    emit_json(args.json, _issued_json(issued), stdout=stderr, private=True)
                else:
                    print(_describe(issued.record), file=stderr)
                    print(issued.token, file=stderr)
                return 0
            issued = issue_token(Path(path), args.tenant, args.principal, **options)
            if args.json:
                emit_json(args.json, _issued_json(issued), stdout=stdout, private=True)
            else:
                print(f"{_describe(issued.record)} (stored hashed in {path}):", file=stdout)
                print(issued.token, file=stdout)
            return 0
        if args.token_command == "list":
            records = list_in_text(stdin.read(), "stdin") if stdio else list_tokens(Path(path))
            now = datetime.now(UTC)
            if args.json:
                emit_json(args.json, [record.to_json(now) for record in records], stdout=stdout)
            elif records:
                print(table(records, now), file=stdout)
            else:
                print(f"no tokens in {'stdin' if stdio else path}", file=stdout)
            return 0
        if args.token_command == "revoke":
            if stdio:
                text, record = revoke_in_text(stdin.read(), args.id, "stdin")
                stdout.write(text)
                print(f"revoked token {record.id} (tenant {record.tenant})", file=stderr)
                return 0
            record = revoke_token(Path(path), args.id)
            print(
                f"revoked token {record.id} (tenant {record.tenant}) in {path}: {PROPAGATION_NOTE}",
                file=stdout,
            )
            return 0
    except OSError as err:
        raise RagIndexError(f"{err.filename or path}: {err.strerror or err}") from err
    raise RagIndexError(f"unknown token command {args.token_command!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ragindex.router.token_tool",
        description="Mint, list and revoke ragindex API tokens in a tokens.json file.",
    )
    parser.add_argument(
        "--file",
        default="tokens.json",
        help="the token file (default ./tokens.json); '-': read it from stdin and write the"
        " new file to stdout, the token to stderr",
    )
    commands = parser.add_subparsers(dest="token_command", required=True)
    add_token_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args, args.file)
    except RagIndexError as err:
        print(f"token_tool: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
