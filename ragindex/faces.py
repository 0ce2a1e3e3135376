"""A part's face: its `__init__` names what the part offers, and loads each name from its module
on first use, so `import ragindex.<part>` stays cheap.

A caller outside a part writes `from ragindex.shards import LogShardReplica`; only then is
`ragindex.shards.log_replica` (and FAISS behind it) imported. The token tool (`python -m
ragindex.router.token_tool`, standard library only), the operator image (no torch, FAISS nor
Ray) and `ragindex --help` import a package without loading what its other modules need.
Type checkers read the names from the face's `if TYPE_CHECKING:` imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_face(
    package: str, homes: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`'s face: `homes` maps each of its modules
    (relative name) to the names the face offers from it."""
    where = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:  # lets `from package import submodule` fall back to importing it
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        vars(sys.modules[package])[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
