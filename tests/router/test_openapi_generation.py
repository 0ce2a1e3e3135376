"""Every request the OpenAPI document describes can be generated, valid and invalid: a schema
that a generator cannot draw from (schemathesis's "Schema Error") leaves that part of the API
untested by the contract test, without failing it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "reference" / "openapi.json"


def _operations() -> list[Any]:
    schema = schemathesis.openapi.from_dict(json.loads(DOCUMENT.read_text()))
    return [op.ok() for op in schema.get_all_operations()]


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_every_operation_can_be_generated(mode: str) -> None:
    """The committed document is the app's own (tests/app/test_docs_site.py holds them equal)."""
    failures = []
    for operation in _operations():
        strategy = operation.as_strategy(generation_mode=schemathesis.GenerationMode(mode))

        @settings(
            max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(strategy)
        def draw(case: Any) -> None:
            pass

        try:
            draw()
        except Unsatisfiable:  # nothing to make invalid (GET /healthz has no input at all)
            assert mode == "negative" and not operation.body and not operation.query
        except Exception as err:  # the generator's own error: the schema is at fault
            failures.append(f"{operation.method.upper()} {operation.path}: {err}")
    assert not failures, failures


def test_the_filter_union_stays_drawable() -> None:
    """A `oneOf` around the filter's shapes made the negative generator give up (Cannot generate
    an array with 1 demanded elements); the shapes exclude each other, so `anyOf` is exact."""
    assert '"oneOf"' not in DOCUMENT.read_text()


def test_a_filter_bound_past_the_metadata_range_is_refused_as_its_schema_says() -> None:
    """An int just past the bound (2**53 + 1) rounded onto it through the float branch and was
    accepted, though the schema says it is out of range (found by the contract test)."""
    from pydantic import TypeAdapter, ValidationError

    from ragindex.router.access import Number
    from ragindex.types import MAX_METADATA_INT

    number = TypeAdapter(Number)
    assert [number.validate_python(v) for v in (MAX_METADATA_INT, -MAX_METADATA_INT, 14.0)] == [
        MAX_METADATA_INT,
        -MAX_METADATA_INT,
        14.0,
    ]
    for past in (MAX_METADATA_INT + 1, -MAX_METADATA_INT - 1, 1e300):
        with pytest.raises(ValidationError):
            number.validate_python(past)
    assert all("minimum" in branch for branch in number.json_schema()["anyOf"])
