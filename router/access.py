"""The read side of a request: its filter and its principals, as schema and as Access.

The models state the filter grammar and its limits in the OpenAPI document; the core
(`ragindex.filters.parse_filter`) checks them again with the same messages for every other
entry point, and is what the legs run. A request may narrow its token's principals, never widen
them: asking for one the token lacks is a 403 (`PrincipalNotGranted`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    WithJsonSchema,
    model_validator,
)

from ragindex.errors import InvalidInput
from ragindex.filters import (
    MAX_IN_VALUES,
    MAX_NESTED_FILTERS,
    MAX_TOP_FILTERS,
    narrow_principals,
    parse_filter,
)
from ragindex.router.auth import Grant
from ragindex.router.query import Access
from ragindex.types import (
    MAX_ACL_PRINCIPALS,
    MAX_ID_PART_CHARS,
    MAX_METADATA_INT,
    MAX_METADATA_STRING_CHARS,
    PRINCIPAL_PATTERN,
    validate_timestamp,
)

METADATA_FIELD_PATTERN = r"^metadata\..{1,64}$"


def _not_an_int(value: object) -> object:
    """An int is the other branch's: as a float, one just past the bound rounds onto it."""
    if isinstance(value, int):
        raise ValueError("an integer is bounded as an integer")
    return value


Number = (
    Annotated[StrictInt, Field(ge=-MAX_METADATA_INT, le=MAX_METADATA_INT)]
    | Annotated[
        StrictFloat,
        Field(ge=-MAX_METADATA_INT, le=MAX_METADATA_INT),
        BeforeValidator(_not_an_int),
    ]
)
Scalar = (
    StrictBool | Number | Annotated[StrictStr, Field(max_length=MAX_METADATA_STRING_CHARS)] | None
)
Principal = Annotated[StrictStr, Field(pattern=PRINCIPAL_PATTERN)]
SourceName = Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_PART_CHARS)]


def _timestamp(value: str) -> str:
    try:
        return validate_timestamp("updated", value)
    except InvalidInput as err:
        raise ValueError(str(err)) from None


Timestamp = Annotated[
    StrictStr,
    AfterValidator(_timestamp),
    WithJsonSchema(
        {
            "type": "string",
            "anyOf": [{"format": "date"}, {"format": "date-time"}],
            "description": "RFC 3339 date or date-time.",
        }
    ),
]


class PrincipalNotGranted(PermissionError):
    """The request asked for a principal its token does not hold: answer 403."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


# A condition is one of the shapes below, told apart by its field and its operator, so that the
# schema says what each field may be compared with (a fuzzer's schema-valid filter is one the
# server takes). Bounds may be absent but not null.
class SourceEq(_Strict):
    field: Literal["source"]
    eq: SourceName = Field(description="Documents of this source.")


class SourceIn(_Strict):
    field: Literal["source"]
    in_: list[SourceName] = Field(
        alias="in", min_length=1, max_length=MAX_IN_VALUES, description="Any of these sources."
    )


class UpdatedEq(_Strict):
    field: Literal["updated"]
    eq: Timestamp = Field(description="Updated at exactly this time.")


class UpdatedIn(_Strict):
    field: Literal["updated"]
    in_: list[Timestamp] = Field(
        alias="in", min_length=1, max_length=MAX_IN_VALUES, description="At any of these times."
    )


def _omit_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def _bound(description: str) -> Any:
    """An optional bound: absent, or a value (the schema shows no null default)."""
    return Field(None, description=description, json_schema_extra=_omit_default)


class _Range(_Strict):
    """One or two bounds: at most one of `gt`/`gte` and one of `lt`/`lte`. A range with its
    lower bound above its upper one is empty and matches nothing."""

    @model_validator(mode="after")
    def _one_lower_one_upper(self) -> Self:
        given = self.model_fields_set - {"field"}
        if not given:
            raise ValueError("a range condition needs a bound: gt, gte, lt or lte")
        if {"gt", "gte"} <= given or {"lt", "lte"} <= given:
            raise ValueError("give at most one lower (gt, gte) and one upper (lt, lte) bound")
        return self


RANGE_SCHEMA: dict[str, Any] = {
    "minProperties": 2,
    "not": {"anyOf": [{"required": ["gt", "gte"]}, {"required": ["lt", "lte"]}]},
}


class UpdatedRange(_Range):
    model_config = ConfigDict(json_schema_extra=RANGE_SCHEMA)
    field: Literal["updated"]
    gt: Timestamp = _bound("After this time.")
    gte: Timestamp = _bound("At or after.")
    lt: Timestamp = _bound("Before.")
    lte: Timestamp = _bound("At or before.")


class MetadataEq(_Strict):
    field: StrictStr = Field(pattern=METADATA_FIELD_PATTERN, description="`metadata.<key>`.")
    eq: Scalar = Field(description="Equal to this (a list value: contains it).")


class MetadataIn(_Strict):
    field: StrictStr = Field(pattern=METADATA_FIELD_PATTERN, description="`metadata.<key>`.")
    in_: list[Scalar] = Field(
        alias="in", min_length=1, max_length=MAX_IN_VALUES, description="Equal to any of these."
    )


class MetadataRange(_Range):
    model_config = ConfigDict(json_schema_extra=RANGE_SCHEMA)
    field: StrictStr = Field(pattern=METADATA_FIELD_PATTERN, description="`metadata.<key>`.")
    gt: Number = _bound("Above.")
    gte: Number = _bound("At or above.")
    lt: Number = _bound("Below.")
    lte: Number = _bound("At or below.")


FILTER_GRAMMAR = (
    'a filter is {"and": [...]}, {"or": [...]} (one may hold another, of conditions'
    ' only) or a condition {"field": F, OP: V}: F `source` (OP `eq`, `in`), `updated` or'
    " `metadata.<key>` (OP `eq`, `in`, or range bounds `gt`/`gte`/`lt`/`lte`)"
)
CONDITION_SHAPES: dict[str, type[BaseModel]] = {
    "source-eq": SourceEq,
    "source-in": SourceIn,
    "updated-eq": UpdatedEq,
    "updated-in": UpdatedIn,
    "updated-range": UpdatedRange,
    "metadata-eq": MetadataEq,
    "metadata-in": MetadataIn,
    "metadata-range": MetadataRange,
}


def _condition_kind(value: object) -> str | None:
    """The condition shape a value is meant to be, from its field and operator; None for what
    is no condition (`source` has no range shape), refused with the grammar."""
    if not isinstance(value, dict):  # a validated model, being serialized
        return next((tag for tag, c in CONDITION_SHAPES.items() if type(value) is c), None)
    if "and" in value or "or" in value:
        return None
    field = value.get("field")
    subject = field if field in ("source", "updated") else "metadata"
    operator = "eq" if "eq" in value else "in" if "in" in value else "range"
    kind = f"{subject}-{operator}"
    return None if kind == "source-range" else kind


def _filter_kind(value: object) -> str | None:
    """`and`, `or` or `condition`, from the keys (or the model, when serializing)."""
    if isinstance(value, dict):
        return "and" if "and" in value else "or" if "or" in value else "condition"
    return "and" if hasattr(value, "and_") else "or" if hasattr(value, "or_") else "condition"


def _any_of(schema: dict[str, Any]) -> None:
    """The filter unions' branches exclude each other by their required keys (`and`, `or`,
    `field` with its operator), so `anyOf` says what `oneOf` does. It is what the schema shows:
    a generator of invalid requests (schemathesis) cannot negate the nested `oneOf` (no array
    of filters can be drawn), which left the filter untested."""
    for key, value in list(schema.items()):
        if isinstance(value, dict):
            _any_of(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _any_of(item)
        if key == "oneOf":
            schema["anyOf"] = schema.pop("oneOf")


def _tagged_by(kind: Callable[[object], str | None]) -> Discriminator:
    """Tagged by its keys, so that a bad filter gets the errors of the one shape it is meant to
    be, or the grammar when it is none of them."""
    return Discriminator(
        kind, custom_error_type="filter_shape", custom_error_message=FILTER_GRAMMAR
    )


ConditionIn = Annotated[
    Annotated[SourceEq, Tag("source-eq")]
    | Annotated[SourceIn, Tag("source-in")]
    | Annotated[UpdatedEq, Tag("updated-eq")]
    | Annotated[UpdatedIn, Tag("updated-in")]
    | Annotated[UpdatedRange, Tag("updated-range")]
    | Annotated[MetadataEq, Tag("metadata-eq")]
    | Annotated[MetadataIn, Tag("metadata-in")]
    | Annotated[MetadataRange, Tag("metadata-range")],
    _tagged_by(_condition_kind),
]


# The depth and the size of a filter live in the schema by levels: a top-level and/or holds up
# to MAX_TOP_FILTERS filters, a nested one up to MAX_NESTED_FILTERS conditions, and nothing
# nests deeper: the schema itself bounds a filter to 16 x 4 conditions.
class NestedAndIn(_Strict):
    and_: list[ConditionIn] = Field(
        alias="and",
        min_length=1,
        max_length=MAX_NESTED_FILTERS,
        description="All of these.",
        json_schema_extra=_any_of,
    )


class NestedOrIn(_Strict):
    or_: list[ConditionIn] = Field(
        alias="or",
        min_length=1,
        max_length=MAX_NESTED_FILTERS,
        description="Any of these.",
        json_schema_extra=_any_of,
    )


NestedFilterIn = Annotated[
    Annotated[NestedAndIn, Tag("and")]
    | Annotated[NestedOrIn, Tag("or")]
    | Annotated[ConditionIn, Tag("condition")],
    _tagged_by(_filter_kind),
]


class AndIn(_Strict):
    and_: list[NestedFilterIn] = Field(
        alias="and",
        min_length=1,
        max_length=MAX_TOP_FILTERS,
        description="All of these.",
        json_schema_extra=_any_of,
    )


class OrIn(_Strict):
    or_: list[NestedFilterIn] = Field(
        alias="or",
        min_length=1,
        max_length=MAX_TOP_FILTERS,
        description="Any of these.",
        json_schema_extra=_any_of,
    )


FilterIn = Annotated[
    Annotated[AndIn, Tag("and")]
    | Annotated[OrIn, Tag("or")]
    | Annotated[ConditionIn, Tag("condition")],
    _tagged_by(_filter_kind),
]


class ReadScope(_Strict):
    """Fields a search or answer request adds to narrow what it reads."""

    filter: FilterIn | None = Field(
        None,
        description="Only chunks matching this: conditions on `source`, `updated` or"
        f" `metadata.<key>` combined with `and`/`or`: at most {MAX_TOP_FILTERS} filters in a"
        f" top-level `and`/`or`, {MAX_NESTED_FILTERS} conditions in a nested one, nothing"
        " deeper.",
        json_schema_extra=_any_of,
    )
    principals: list[Principal] | None = Field(
        None,
        min_length=1,
        max_length=MAX_ACL_PRINCIPALS,
        description="Read as these principals only: a subset of the token's (else 403).",
    )


def access_for(grant: Grant, scope: ReadScope) -> Access:
    """The Access a request reads with; InvalidInput for a bad filter, PrincipalNotGranted
    for a principal the token lacks."""
    try:
        principals = narrow_principals(grant.principals, scope.principals)
    except PermissionError as err:
        raise PrincipalNotGranted(str(err)) from None
    data = (
        None if scope.filter is None else scope.filter.model_dump(by_alias=True, exclude_unset=True)
    )
    return Access(principals=principals, filter=parse_filter(data))
