"""Tokens without the full install: `python -m ragindex.router.token_tool` runs on the
standard library alone, and what it writes into a Secret is what the Router's loader accepts.
Also `ragindex token ...`'s bad inputs: one line, exit 2, nothing changed."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ragindex.app import auth_dir
from ragindex.app.cli import main as ragindex_main
from ragindex.router import Grant, TokenVerifier, tokens_path
from ragindex.router.auth import hash_token
from ragindex.router.token_tool import build_parser
from ragindex.serve_config import AUTH_DIR_ENV

REPO = Path(__file__).resolve().parents[2]

# Runs the tool with every import of a module outside the standard library (and ragindex's
# own) refused: what the operator image, or a bare python, would give it.
STDLIB_ONLY = """
import runpy, sys
allowed = set(sys.stdlib_module_names) | {"ragindex"}
at_start = set(sys.modules)  # the interpreter's own (site, the editable install's finder)
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in allowed:
            raise ImportError(f"{name} is not in the standard library")
        return None
sys.meta_path.insert(0, Refuse())
sys.argv = ["token_tool", *sys.argv[1:]]
try:
    runpy.run_module("ragindex.router.token_tool", run_name="__main__")
finally:
    loaded = sorted(
        m for m in set(sys.modules) - at_start if m.partition(".")[0] not in allowed
    )
    assert not loaded, loaded
"""


def tool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", STDLIB_ONLY, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_tool_mints_lists_and_revokes_with_the_standard_library_only(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    made = tool("--file", str(path), "create", "--tenant", "acme", "--principal", "group:eng",
                "--expires-in", "30d", "--name", "ci")  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stdout.splitlines()[-1]
    token_id = re.search(r"token ([0-9a-f]{12}) ", made.stdout)[1]  # type: ignore[index]
    assert TokenVerifier(tmp_path).grant_for(token) == Grant("acme", frozenset({"group:eng"}))
    listed = tool("--file", str(path), "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["id"], row["tenant"], row["name"], row["expired"]) == (
        token_id,
        "acme",
        "ci",
        False,
    )
    assert token not in listed.stdout and hash_token(token) not in listed.stdout
    gone = tool("--file", str(path), "revoke", token_id)
    assert gone.returncode == 0, gone.stderr
    assert TokenVerifier(tmp_path).grant_for(token) is None
    bad = tool("--file", str(path), "revoke", token_id)
    assert (bad.returncode, bad.stderr.count("\n")) == (2, 1)
    assert "no token with id" in bad.stderr


def kubelet_mount(secret: dict[str, dict[str, str]], mount: Path) -> None:
    """A Secret volume as the kubelet lays it out (keys under a timestamped dir)."""
    target = mount / "..2026_12_02_12_00_00.000000000"
    target.mkdir(parents=True)
    for key, value in secret["data"].items():
        (target / key).write_bytes(base64.b64decode(value))
        (mount / key).symlink_to(f"..data/{key}")
    (mount / "..data").symlink_to(target.name)


def test_the_secret_recipe_yields_a_file_the_router_loader_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kubectl get secret ... -o jsonpath='{.data.tokens\.json}' | base64 -d: an existing Secret
    # (one entry from before ids existed), through the tool on stdin/stdout as via kubectl exec.
    old = {"tokens": {hash_token("old-token"): {"tenant": "acme", "principals": []}}}
    made = tool("--file", "-", "create", "--tenant", "globex", "--expires-in", "12h",
                stdin=json.dumps(old))  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stderr.splitlines()[-1]
    assert token not in made.stdout  # stdout is the new file: digests only
    # kubectl create secret generic ... --from-file=tokens.json --dry-run=client -o yaml
    secret = {"data": {"tokens.json": base64.b64encode(made.stdout.encode()).decode()}}
    kubelet_mount(secret, tmp_path / "auth")
    monkeypatch.setenv(AUTH_DIR_ENV, str(tmp_path / "auth"))
    verifier = TokenVerifier(auth_dir(tmp_path / "data"))  # as the Router builds it
    assert verifier.grant_for(token) == Grant("globex")
    assert verifier.grant_for("old-token") == Grant("acme")
    # Revoking through the same pipe: the next file lacks the token, the old entry stays.
    token_id = json.loads(tool("--file", "-", "list", "--json", stdin=made.stdout).stdout)
    [new_id] = [row["id"] for row in token_id if row["tenant"] == "globex"]
    gone = tool("--file", "-", "revoke", new_id, stdin=made.stdout)
    assert gone.returncode == 0, gone.stderr
    path = tmp_path / "after" / "tokens.json"
    path.parent.mkdir()
    path.write_text(gone.stdout)
    after = TokenVerifier(path.parent)
    assert after.grant_for(token) is None and after.grant_for("old-token") == Grant("acme")
    # Bad input on the pipe: one line, exit 2, and nothing on stdout to overwrite a Secret with.
    bad = tool("--file", "-", "create", "--tenant", "globex", "--expires-in", "soon",
               stdin=made.stdout)  # fmt: skip
    assert (bad.returncode, bad.stdout, bad.stderr.count("\n")) == (2, "", 1)


def test_the_documented_recipe_parses() -> None:
    """Every token_tool command in the docs is one this parser accepts."""
    commands = []
    for page in ("docs/kubernetes.md", "docs/tenancy.md"):
        for line in (REPO / page).read_text().splitlines():
            _, found, rest = line.partition("-m ragindex.router.token_tool ")
            if found:
                words = shlex.split(rest.split(" <", 1)[0].split(" >", 1)[0].split(" |")[0])
                commands.append(words)
    assert len(commands) >= 3, commands
    for words in commands:
        build_parser().parse_args(words)


@pytest.mark.parametrize(
    "argv",
    [
        ["create", "--tenant", "acme", "--expires-in", "30x"],
        ["create", "--tenant", "acme", "--expires-at", "2027-01-31"],
        ["create", "--tenant", "acme", "--expires-at", "2020-01-01T00:00:00Z"],
        ["create", "--tenant", "Not A Tenant"],
        ["create", "--tenant", "acme", "--principal", "eng"],
        ["create", "--tenant", "acme", "--name", "has space"],
        ["revoke", "abcdefabcdef"],
        ["revoke", "not-an-id"],
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert ragindex_main(["token", "create", "--tenant", "acme", "--data-dir", str(tmp_path)]) == 0
    before = tokens_path(tmp_path).read_text()
    capsys.readouterr()
    assert ragindex_main(["token", *argv, "--data-dir", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("ragindex: error: ") and err.count("\n") == 1, err
    assert tokens_path(tmp_path).read_text() == before


def test_cli_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert ragindex_main(["token", "create", "--tenant", "acme", "--expires-in", "1h", *data]) == 0
    out = capsys.readouterr().out
    token = out.splitlines()[-1]  # the quickstart's `| tail -1`
    assert ragindex_main(["token", "create", "--tenant", "acme", "--json", *data]) == 0
    second = json.loads(capsys.readouterr().out)
    assert ragindex_main(["token", "list", *data]) == 0
    table = capsys.readouterr().out
    assert table.startswith("ID") and second["id"] in table and "never" in table
    assert token not in table and second["token"] not in table
    assert ragindex_main(["token", "revoke", second["id"], *data]) == 0
    assert "revoked token" in capsys.readouterr().out
    assert ragindex_main(["token", "list", "--json", *data]) == 0
    [left] = json.loads(capsys.readouterr().out)
    assert left["expires"] is not None and TokenVerifier(tmp_path).grant_for(token) is not None
    assert os.stat(tokens_path(tmp_path)).st_mode & 0o777 == 0o600
