"""Each part's face (`ragindex.faces`): what it names for type checkers is what it loads at run
time, every name resolves, and importing a face loads none of the heavy libraries."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACES = {
    "ragindex.ingest": "ingest",
    "ragindex.shards": "shards",
    "ragindex.lexical": "lexical",
    "ragindex.models": "models",
    "ragindex.router": "router",
    "ragindex.log": "log",
    "ragindex.operator": "operator",
    "ragindex.testing": "testing",
    "ragindex.app": "app",
    "ragindex.measure.evals": "measure/evals",
    "ragindex.measure.servers": "measure/servers",
    "ragindex.telemetry": "ragindex/telemetry",
}
HEAVY = ("ray", "torch", "faiss", "tantivy", "confluent_kafka", "elasticsearch", "fastapi", "kopf")


def declared(folder: str) -> tuple[dict[str, str], dict[str, str]]:
    """(name -> module) from the face's `if TYPE_CHECKING:` imports and from its lazy_face call."""
    tree = ast.parse((ROOT / folder / "__init__.py").read_text())
    typed: dict[str, str] = {}
    lazy: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.If):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and isinstance(node.test, ast.Name):
                for alias in inner.names:
                    typed[alias.name] = inner.module.rsplit(".", 1)[1]
            if isinstance(inner, ast.Call) and getattr(inner.func, "id", "") == "lazy_face":
                homes = ast.literal_eval(inner.args[1])
                lazy.update({name: module for module, names in homes.items() for name in names})
    return typed, lazy


@pytest.mark.parametrize("package", sorted(FACES))
def test_face_names_what_it_loads(package):
    typed, lazy = declared(FACES[package])
    face = importlib.import_module(package)
    assert typed == lazy
    assert sorted(face.__all__) == sorted(lazy)
    for name, module in lazy.items():
        home = importlib.import_module(f"{package}.{module}")
        assert getattr(face, name) is getattr(home, name)
    with pytest.raises(AttributeError):
        face.no_such_name  # noqa: B018


def test_importing_the_faces_loads_no_heavy_library():
    code = (
        "import sys\n"
        + "".join(f"import {p}\n" for p in sorted(FACES))
        + f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_router_face_needs_only_the_standard_library():
    """`python -m ragindex.router.token_tool` runs where only Python is installed."""
    code = (
        "import sys, ragindex.router.token_tool\n"
        "print(sorted(m for m in ('numpy', 'pydantic', 'yaml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
