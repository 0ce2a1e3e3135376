"""The read side of a request: its filter and its principals, as schema and as Access.

The models state the filter grammar and its limits in the OpenAPI document; the core
(`ragindex.filters.parse_filter`) checks them again with the same messages for every other
entry point, and is what the legs run. A request may narrow its token's principals, never widen
them: asking for one the token lacks is a 403 (`PrincipalNotGranted`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
)

from ragindex.filters import (
    MAX_FILTER_CONDITIONS,
    MAX_IN_VALUES,
    narrow_principals,
    parse_filter,
)
from ragindex.router.auth import Grant
from ragindex.router.query import Access
from ragindex.types import (
    MAX_ACL_PRINCIPALS,
    MAX_METADATA_INT,
    MAX_METADATA_STRING_CHARS,
    PRINCIPAL_PATTERN,
)

FIELD_PATTERN = r"^(source|updated|metadata\..{1,64})$"
Number = (
    Annotated[StrictInt, Field(ge=-MAX_METADATA_INT, le=MAX_METADATA_INT)]
    | Annotated[StrictFloat, Field(ge=-MAX_METADATA_INT, le=MAX_METADATA_INT)]
)
Scalar = (
    StrictBool | Number | Annotated[StrictStr, Field(max_length=MAX_METADATA_STRING_CHARS)] | None
)
Bound = Number | Annotated[StrictStr, Field(max_length=40)]
Principal = Annotated[StrictStr, Field(pattern=PRINCIPAL_PATTERN)]


class PrincipalNotGranted(PermissionError):
    """The request asked for a principal its token does not hold: answer 403."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class ConditionIn(_Strict):
    """One condition: exactly one of `eq`, `in`, or one or two range bounds."""

    field: StrictStr = Field(
        pattern=FIELD_PATTERN, description="`source`, `updated` or `metadata.<key>`."
    )
    eq: Scalar = Field(None, description="Equal to this (a list field: contains it).")
    in_: list[Scalar] | None = Field(
        None, alias="in", min_length=1, max_length=MAX_IN_VALUES, description="Equal to any."
    )
    gt: Bound | None = Field(None, description="Above (a number; `updated`: RFC 3339).")
    gte: Bound | None = Field(None, description="At or above.")
    lt: Bound | None = Field(None, description="Below.")
    lte: Bound | None = Field(None, description="At or below.")


class AndIn(_Strict):
    and_: list[FilterIn] = Field(
        alias="and", min_length=1, max_length=MAX_FILTER_CONDITIONS, description="All of these."
    )


class OrIn(_Strict):
    or_: list[FilterIn] = Field(
        alias="or", min_length=1, max_length=MAX_FILTER_CONDITIONS, description="Any of these."
    )


def _filter_kind(value: object) -> str:
    if isinstance(value, dict):
        return "and" if "and" in value else "or" if "or" in value else "condition"
    return "and" if hasattr(value, "and_") else "or" if hasattr(value, "or_") else "condition"


# Tagged by its key, so that a bad filter gets the errors of the one form it is meant to be.
FilterIn = Annotated[
    Annotated[AndIn, Tag("and")]
    | Annotated[OrIn, Tag("or")]
    | Annotated[ConditionIn, Tag("condition")],
    Discriminator(_filter_kind),
]
AndIn.model_rebuild()
OrIn.model_rebuild()


class ReadScope(_Strict):
    """Fields a search or answer request adds to narrow what it reads."""

    filter: FilterIn | None = Field(
        None,
        description="Only chunks matching this: conditions on `source`, `updated` or"
        " `metadata.<key>` combined with `and`/`or` (at most 4 levels, 32 conditions).",
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
