"""The docs site: its generated reference pages equal what the code gives today, it builds with
`mkdocs build --strict`, and its pages carry no history, issue numbers or paths outside the
repo."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing
from pathlib import Path

from ragindex.app import docs_site
from ragindex.config import RagIndexSpec
from ragindex.generations import GENERATION_FIELDS

REPO = docs_site.REPO
DOCS = REPO / "docs"


def test_committed_reference_pages_equal_the_generator_output() -> None:
    stale = docs_site.stale_pages(REPO, docs_site.generated_pages())
    assert stale == [], f"out of date: {stale}; run scripts/gen_docs.py and commit the result"


def test_check_mode_reports_a_drifted_page(tmp_path: Path) -> None:
    pages = docs_site.generated_pages()
    for rel, text in pages.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    said: list[str] = []
    assert docs_site.main(["--check", "--root", str(tmp_path)], out=said.append) == 0
    page = tmp_path / docs_site.REFERENCE / "configuration.md"
    page.write_text(page.read_text().replace("new generation", "in place"))
    assert docs_site.main(["--check", "--root", str(tmp_path)], out=said.append) == 1
    assert said == [
        f"out of date: {docs_site.REFERENCE / 'configuration.md'} (run scripts/gen_docs.py)"
    ]


def _leaf_paths(model: type, prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        path = f"{prefix}{field.alias or name}"
        # A nested model, or an optional one (`Model | None`), is a section of its own.
        args = typing.get_args(field.annotation)
        optional = [a for a in args if a is not type(None)] if type(None) in args else []
        sub = optional[0] if len(optional) == 1 else field.annotation
        if isinstance(sub, type) and hasattr(sub, "model_fields"):
            out += _leaf_paths(sub, f"{path}.")
        else:
            out.append(path)
    return out


def test_configuration_reference_has_every_field_and_its_generation_effect() -> None:
    page = docs_site.config_reference()
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `([A-Za-z0-9.]+)` \|.*\| ([^|]+) \|$", page, flags=re.M)
    }
    leaves = _leaf_paths(RagIndexSpec)
    assert set(leaves) == set(rows)
    for path in leaves:
        effect = "new generation" if path in GENERATION_FIELDS else "in place"
        assert rows[path].startswith(effect), (path, rows[path])
    # scaling.ingest's defaults come from its own factory, not AutoscalingSpec's.
    assert "| `scaling.ingest.maxReplicas` | integer | `2` |" in page


def test_site_pages_carry_no_history_issue_numbers_or_outside_paths() -> None:
    forbidden = {
        "an issue number": re.compile(r"(?<![\w/&])#\d+\b"),
        "a stop number": re.compile(r"\bstop \d+\b", re.I),
        "a path outside the repo": re.compile(r"\.\./(?!shared\b)(?![\w./-]+\.md)"),
    }
    found = [
        f"{page.relative_to(REPO)}:{n}: {what}: {line.strip()}"
        for page in sorted(DOCS.rglob("*.md"))
        for n, line in enumerate(page.read_text().splitlines(), 1)
        for what, pattern in forbidden.items()
        if pattern.search(line)
    ]
    assert found == []


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for page in (
        "index.html",
        "reference/configuration/index.html",
        "reference/http-api/index.html",
    ):
        assert (tmp_path / "site" / page).is_file(), page
