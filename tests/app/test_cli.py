"""The `ragindex` command line's contract: --version, one line per error with its documented
exit status (the traceback only with --debug), and the --json convention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragindex.app.cli import EXIT_CODES, exit_code, main
from ragindex.errors import BackendUnavailable, InvalidInput, RagIndexError
from ragindex.generations import PromotionRefused


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("ragindex 0.")


@pytest.mark.parametrize(
    ("make", "argv", "code", "message"),
    [
        (
            None,
            ["render", "--spec", "{tmp}/missing.yaml"],
            2,
            "spec {tmp}/missing.yaml: No such file",
        ),
        ("dense: [shards", ["render", "--spec", "{tmp}/spec.yaml"], 2, "is not YAML"),
        (
            "dense:\n  shards: 0\n  hnsw: {m: many}\n",
            ["render", "--spec", "{tmp}/spec.yaml"],
            2,
            "spec {tmp}/spec.yaml: dense.shards: Input should be greater than or equal to 1;"
            " dense.hnsw.m: Input should be a valid integer",
        ),
        ("- a list", ["render", "--spec", "{tmp}/spec.yaml"], 2, "expected a mapping"),
        (None, ["ingest", "{tmp}/nowhere", "--data-dir", "{tmp}/d"], 2, "no such file or folder"),
        (None, ["ingest", "{tmp}", "--url", "http://127.0.0.1:9"], 2, "--url needs a token"),
        (None, ["ingest", "{tmp}", "--skip", "3"], 2, "go with --url"),
        (None, ["search", "q", "--data-dir", "{tmp}/empty"], 4, "nothing was ingested"),
    ],
)
def test_bad_input_is_one_line_and_a_documented_status(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    make: str | None,
    argv: list[str],
    code: int,
    message: str,
) -> None:
    if make is not None:
        (tmp_path / "spec.yaml").write_text(make)
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    got, out, err = run(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert (got, out) == (code, "")
    assert err.count("\n") == 1 and err.startswith("ragindex: error: "), err
    assert message.format(tmp=tmp_path) in err
    assert code in EXIT_CODES


def test_debug_adds_the_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "--debug", "render", "--spec", str(tmp_path / "missing.yaml"))
    assert code == 2 and "Traceback (most recent call last)" in err
    assert err.rstrip().splitlines()[-1].startswith("ragindex: error: spec ")


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["search"])
    assert done.value.code == 2 and "usage:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (PromotionRefused("abc12345", ["self-check: 3 of 20 missed"]), 1),
        (InvalidInput("x"), 2),
        (BackendUnavailable("x"), 3),
        (RagIndexError("x"), 4),
        (PermissionError(13, "Permission denied"), 74),
        (KeyError("bug"), 70),
        (KeyboardInterrupt(), 130),
    ],
)
def test_every_error_kind_has_its_status(err: BaseException, code: int) -> None:
    assert exit_code(err) == code and code in EXIT_CODES


def test_render_json_convention(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`--json FILE` writes the file whole; a bare `--json` (or `-`) is standard output."""
    from ragindex.router.cli_output import emit_json

    emit_json(tmp_path / "out" / "r.json", {"a": 1})
    assert json.loads((tmp_path / "out" / "r.json").read_text()) == {"a": 1}
    emit_json("-", {"b": 2})
    assert json.loads(capsys.readouterr().out) == {"b": 2}
