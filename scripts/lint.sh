#!/usr/bin/env bash
# Static checks: ruff, mypy and the import-linter layer contracts.
# import-linter scans a package's own folder, but our parts live in top-level folders mapped into
# `ragindex.*` by package-dir; so the contracts are checked against a built copy of the package.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy" ragindex ingest shards lexical models log router evals app operator
built=$(mktemp -d)
trap 'rm -rf "$built"' EXIT
uv pip install --quiet --python "$VENV/bin/python" --no-deps --no-build-isolation --target "$built" . >/dev/null
(cd "$built" && PYTHONPATH="$built" "$OLDPWD/$VENV/bin/lint-imports" --config "$OLDPWD/pyproject.toml" --no-cache)
