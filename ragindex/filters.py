"""Who may read a chunk and which chunks a search asks for: ACLs, filters and their terms.

A document's `acl` lists principals (`user:alice`, `group:eng`); no ACL means the whole tenant.
A caller's principals come from its token; a request may narrow them, never widen them.

Every leg enforces the same thing inside its own search (DESIGN.md invariant 1): a chunk is
described by a set of *filter terms* (`chunk_terms`), and an access + filter is compiled to a
boolean expression over terms (`compile_access`). BM25 indexes the terms in one keyword field
and runs the expression as filter clauses (tantivy and Elasticsearch alike); the dense leg
keeps postings of the same terms and selects the allowed ids (`select`). Numeric and time
ranges become prefix terms of an order-preserving 64-bit encoding (a trie, as Lucene's numeric
range queries were), so a range is a handful of exact terms in every backend.

Filter grammar (JSON): `{"and": [F, ...]}`, `{"or": [F, ...]}` (1-16 filters; nested inside
another and/or: 1-4 conditions, no deeper), or a condition
`{"field": F, OP: V}` with F `source`, `updated` or `metadata.<key>`, OP one of `eq`, `in`
(a list), `gt`, `gte`, `lt`, `lte` (one or two bounds). Ranges need numbers (`updated`: RFC
3339 times); a range whose lower bound is above its upper one matches nothing.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ragindex.errors import InvalidInput
from ragindex.types import MAX_METADATA_INT, Chunk, validate_principal, validate_timestamp

MAX_FILTER_DEPTH = 3  # an and/or of and/ors of conditions, no deeper
MAX_TOP_FILTERS = 16  # filters in a top-level and/or
MAX_NESTED_FILTERS = 4
"""Conditions in a nested and/or. So a filter holds at most 16 x 4 = 64 conditions, which bounds
the terms it compiles to (64 range conditions: ~13 k terms, compiled in ~30 ms here)."""
MAX_IN_VALUES = 100
RANGE_OPS = ("gt", "gte", "lt", "lte")
OPS = ("eq", "in", *RANGE_OPS)
FILTER_FIELDS = "`source`, `updated` or `metadata.<key>`"

ACL_PREFIX = "a:"
"""What every ACL term starts with: `a:<principal>`, or PUBLIC."""
PUBLIC = f"{ACL_PREFIX}*"
"""The ACL term of a chunk every principal of its tenant may read (no ACL)."""
_TRIE_STEP = 4
_TRIE_BITS = 64


# ---------------------------------------------------------------- principals and ACLs


def narrow_principals(granted: Collection[str], asked: Sequence[str] | None) -> frozenset[str]:
    """The principals a request reads as: the token's, or a subset of them it asks for.

    Raises PermissionError naming the first principal the token does not hold."""
    if asked is None:
        return frozenset(granted)
    for principal in asked:
        validate_principal(principal)
        if principal not in granted:
            raise PermissionError(
                f"this token does not hold principal {principal!r}; a request may only narrow"
                " its token's principals"
            )
    return frozenset(asked)


def readable(acl: Sequence[str] | None, principals: Collection[str]) -> bool:
    return acl is None or any(p in principals for p in acl)


# ---------------------------------------------------------------- filters


@dataclass(frozen=True)
class Condition:
    field: str  # "source", "updated" or "metadata.<key>"
    eq: tuple[Any, ...] = ()  # any of these values (eq: one, in: several)
    lower: float | None = None
    lower_inclusive: bool = True
    upper: float | None = None
    upper_inclusive: bool = True


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Filter, ...]


Filter = Condition | AllOf | AnyOf


def parse_filter(data: object) -> Filter | None:
    """The filter of a request (None: no filter); InvalidInput says what is wrong and where."""
    if data is None:
        return None
    return _parse(data, "filter", 1)


def _parse(data: object, where: str, depth: int) -> Filter:
    if not isinstance(data, dict):
        raise InvalidInput(f"{where} must be an object")
    if set(data) in ({"and"}, {"or"}):
        (op, parts), *_ = data.items()
        if depth >= MAX_FILTER_DEPTH:
            raise InvalidInput(f"{where}: filters nest at most {MAX_FILTER_DEPTH} levels deep")
        most = MAX_TOP_FILTERS if depth == 1 else MAX_NESTED_FILTERS
        if not isinstance(parts, list) or not 0 < len(parts) <= most:
            raise InvalidInput(f"{where}.{op} must be a list of 1-{most} filters")
        parsed = tuple(_parse(p, f"{where}.{op}[{i}]", depth + 1) for i, p in enumerate(parts))
        return AllOf(parsed) if op == "and" else AnyOf(parsed)
    return _parse_condition(data, where)


def _parse_condition(data: dict[str, Any], where: str) -> Condition:
    field = data.get("field")
    ops = set(data) - {"field"}
    if not isinstance(field, str) or not _known_field(field):
        raise InvalidInput(
            f"{where}: a condition needs `field` ({FILTER_FIELDS}) or the object is `and`/`or`;"
            f" got field {str(field)[:80]!r}"
        )
    if not ops or not ops <= set(OPS):
        raise InvalidInput(f"{where}: operators are {', '.join(OPS)}; got {sorted(ops) or 'none'}")
    if ops & {"eq", "in"} and len(ops) > 1:
        raise InvalidInput(f"{where}: `eq` and `in` stand alone, without other operators")
    if "eq" in ops:
        return Condition(field, eq=(_value(field, data["eq"], f"{where}.eq"),))
    if "in" in ops:
        values = data["in"]
        if not isinstance(values, list) or not 0 < len(values) <= MAX_IN_VALUES:
            raise InvalidInput(f"{where}.in must be a list of 1-{MAX_IN_VALUES} values")
        return Condition(
            field, eq=tuple(_value(field, v, f"{where}.in[{i}]") for i, v in enumerate(values))
        )
    if ops >= {"gt", "gte"} or ops >= {"lt", "lte"}:
        raise InvalidInput(f"{where}: give at most one lower and one upper bound")
    if field == "source":
        raise InvalidInput(f"{where}: `source` takes `eq` or `in`, not a range")
    bounds = {op: _bound(field, data[op], f"{where}.{op}") for op in ops}
    lower = bounds.get("gt", bounds.get("gte"))
    upper = bounds.get("lt", bounds.get("lte"))
    # A lower bound above the upper one is an empty range: it matches nothing, as in SQL.
    return Condition(
        field,
        lower=lower,
        lower_inclusive="gt" not in ops,
        upper=upper,
        upper_inclusive="lt" not in ops,
    )


def _known_field(field: str) -> bool:
    if field in ("source", "updated"):
        return True
    key = field.removeprefix("metadata.")
    return field.startswith("metadata.") and 0 < len(key) <= 64


def _value(field: str, value: object, where: str) -> Any:
    if field == "source":
        if not isinstance(value, str):
            raise InvalidInput(f"{where}: a source is a string")
        return value
    if field == "updated":
        return epoch_seconds(validate_timestamp(where, value))
    if _is_number(value) and not _in_number_range(value):
        raise InvalidInput(f"{where}: numbers must be finite and within +-2**53")
    if value is not None and not isinstance(value, str | int | float | bool):
        raise InvalidInput(f"{where}: compare with a string, number, boolean or null")
    return value


def _bound(field: str, value: object, where: str) -> float:
    if field == "updated":
        return epoch_seconds(validate_timestamp(where, value))
    if not _is_number(value) or not _in_number_range(value):
        raise InvalidInput(
            f"{where}: a range bound on {field} must be a finite number within +-2**53"
        )
    return float(value)  # type: ignore[arg-type]


def _in_number_range(value: object) -> bool:
    """Metadata numbers are within +-2**53 (MAX_METADATA_INT); so must their comparands be."""
    if isinstance(value, int):
        return abs(value) <= MAX_METADATA_INT
    return isinstance(value, float) and math.isfinite(value) and abs(value) <= MAX_METADATA_INT


def epoch_seconds(timestamp: str) -> float:
    """An RFC 3339 date or date-time as UTC seconds (a bare date is its midnight, UTC)."""
    moment = datetime.fromisoformat(timestamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def superseded(incoming: str | None, current: str | None) -> bool:
    """Whether a version stamped `incoming` is older than the one stamped `current` (both RFC
    3339): when two versions of a document are in flight, the newer `updated` wins. A version
    without `updated` never loses (nor beats a newer one by its absence)."""
    if incoming is None or current is None:
        return False
    return epoch_seconds(incoming) < epoch_seconds(current)


def matches(chunk: Chunk, flt: Filter | None, principals: Collection[str] | None) -> bool:
    """Access + filter applied directly to a chunk: the oracle the terms must agree with."""
    allowed = principals is None or readable(chunk.acl, principals)
    return allowed and (flt is None or _holds(chunk, flt))


def _holds(chunk: Chunk, flt: Filter) -> bool:
    if isinstance(flt, AllOf):
        return all(_holds(chunk, p) for p in flt.parts)
    if isinstance(flt, AnyOf):
        return any(_holds(chunk, p) for p in flt.parts)
    values = _field_values(chunk, flt.field)
    if flt.eq:
        return any(_same(v, w) for v in values for w in flt.eq)
    return any(_in_range(v, flt) for v in values if _is_number(v))


def _field_values(chunk: Chunk, field: str) -> list[Any]:
    if field == "source":
        return [chunk.source]
    if field == "updated":
        return [] if chunk.updated is None else [epoch_seconds(chunk.updated)]
    key = field.removeprefix("metadata.")
    if key not in chunk.metadata:
        return []
    value = chunk.metadata[key]
    return list(value) if isinstance(value, list) else [value]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: object, b: object) -> bool:
    if _is_number(a) and _is_number(b):
        return float(a) == float(b)  # type: ignore[arg-type]
    return type(a) is type(b) and a == b


def _in_range(value: float, c: Condition) -> bool:
    v = float(value)
    if c.lower is not None and (v < c.lower or (v == c.lower and not c.lower_inclusive)):
        return False
    return not (c.upper is not None and (v > c.upper or (v == c.upper and not c.upper_inclusive)))


# ---------------------------------------------------------------- terms


@dataclass(frozen=True)
class AnyTerm:
    """True when the chunk has at least one of these terms (no terms: matches nothing)."""

    terms: frozenset[str]


@dataclass(frozen=True)
class AllExpr:
    parts: tuple[TermExpr, ...]


@dataclass(frozen=True)
class AnyExpr:
    parts: tuple[TermExpr, ...]


TermExpr = AnyTerm | AllExpr | AnyExpr


def chunk_terms(chunk: Chunk) -> frozenset[str]:
    """Every filter term of a chunk: ACL, source, updated and metadata."""
    terms = {PUBLIC} if chunk.acl is None else {f"{ACL_PREFIX}{p}" for p in chunk.acl}
    terms.add(_eq_term("source", chunk.source))
    for field in ["updated", *(f"metadata.{k}" for k in chunk.metadata)]:
        for value in _field_values(chunk, field):
            if _is_number(value):
                terms.update(_number_terms(field, float(value)))
            else:
                terms.add(_eq_term(field, value))
    return frozenset(terms)


def compile_access(flt: Filter | None, principals: Collection[str] | None) -> TermExpr | None:
    """The expression every leg runs: readable by one of `principals`, and the filter.

    `principals` None is the operator's view (evaluations, benchmarks), which no ACL limits;
    the HTTP API always passes its token's principals."""
    parts: list[TermExpr] = []
    if principals is not None:
        parts.append(AnyTerm(frozenset({PUBLIC, *(f"{ACL_PREFIX}{p}" for p in principals)})))
    if flt is not None:
        parts.append(_compile(flt))
    return None if not parts else parts[0] if len(parts) == 1 else AllExpr(tuple(parts))


def _compile(flt: Filter) -> TermExpr:
    if isinstance(flt, AllOf):
        return AllExpr(tuple(_compile(p) for p in flt.parts))
    if isinstance(flt, AnyOf):
        return AnyExpr(tuple(_compile(p) for p in flt.parts))
    if flt.eq:
        terms: set[str] = set()
        for value in flt.eq:
            if _is_number(value):
                terms.update(_range_terms(flt.field, float(value), float(value)))
            else:
                terms.add(_eq_term(flt.field, value))
        return AnyTerm(frozenset(terms))
    lower = -math.inf if flt.lower is None else flt.lower
    upper = math.inf if flt.upper is None else flt.upper
    lo, hi = sortable(lower), sortable(upper)
    lo += 0 if flt.lower_inclusive or flt.lower is None else 1
    hi -= 0 if flt.upper_inclusive or flt.upper is None else 1
    return AnyTerm(frozenset(_trie_terms(flt.field, lo, hi)))


def holds(expr: TermExpr, terms: Collection[str]) -> bool:
    """Evaluate an expression on one chunk's terms."""
    if isinstance(expr, AnyTerm):
        return not expr.terms.isdisjoint(terms)
    if isinstance(expr, AllExpr):
        return all(holds(p, terms) for p in expr.parts)
    return any(holds(p, terms) for p in expr.parts)


def select(expr: TermExpr, postings: Mapping[str, set[str]]) -> set[str]:
    """The ids whose terms satisfy `expr`, from postings (term -> ids)."""
    if isinstance(expr, AnyTerm):
        found: set[str] = set()
        for term in expr.terms:
            found |= postings.get(term, set())
        return found
    parts = sorted((select(p, postings) for p in expr.parts), key=len)
    if isinstance(expr, AllExpr):
        return set.intersection(*parts) if parts else set()
    return set().union(*parts)


def expression_terms(expr: TermExpr) -> Iterable[str]:
    if isinstance(expr, AnyTerm):
        yield from expr.terms
    else:
        for part in expr.parts:
            yield from expression_terms(part)


def _json_value(value: object) -> str:
    """`json.dumps(value, ensure_ascii=False, sort_keys=True)`; strings take the encoder's C
    function directly (the same output, without the per-call encoder set-up that dominated
    replaying a log's chunks into their filter terms)."""
    if isinstance(value, str):
        return _encode_string(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


_encode_string = json.encoder.encode_basestring  # what dumps(..., ensure_ascii=False) uses


def _field_key(field: str) -> str:
    return _json_value(field)


def _eq_term(field: str, value: object) -> str:
    return f"e:{_field_key(field)}={_json_value(value)}"


def sortable(value: float) -> int:
    """An order-preserving map of floats to 0..2**64-1 (-0.0 is 0.0)."""
    (bits,) = struct.unpack(">Q", struct.pack(">d", value + 0.0))
    return (bits ^ 0xFFFF_FFFF_FFFF_FFFF) if bits >> 63 else bits | (1 << 63)


def _number_terms(field: str, value: float) -> list[str]:
    u = sortable(value)
    key = _field_key(field)
    return [f"n:{key}:{s}:{u >> s:x}" for s in range(0, _TRIE_BITS, _TRIE_STEP)]


def _range_terms(field: str, lower: float, upper: float) -> list[str]:
    return _trie_terms(field, sortable(lower), sortable(upper))


def _trie_terms(field: str, lo: int, hi: int) -> list[str]:
    key = _field_key(field)
    return [f"n:{key}:{s}:{p:x}" for s, p in split_range(lo, hi)]


def split_range(
    lo: int, hi: int, step: int = _TRIE_STEP, bits: int = _TRIE_BITS
) -> list[tuple[int, int]]:
    """(shift, prefix) pairs whose value blocks exactly cover lo..hi (inclusive), few of them."""
    out: list[tuple[int, int]] = []
    top = (1 << bits) - 1
    shift = 0
    while lo <= hi:
        mask = ((1 << step) - 1) << shift
        diff = 1 << (shift + step)
        has_lower = lo & mask != 0
        has_upper = hi & mask != mask
        next_lo = ((lo + diff) if has_lower else lo) & ~mask
        next_hi = ((hi - diff) if has_upper else hi) & ~mask
        if shift + step >= bits or next_lo > top or next_hi < 0 or next_lo > next_hi:
            out.extend((shift, p) for p in range(lo >> shift, (hi >> shift) + 1))
            break
        if has_lower:
            out.extend((shift, p) for p in range(lo >> shift, ((lo | mask) >> shift) + 1))
        if has_upper:
            out.extend((shift, p) for p in range((hi & ~mask) >> shift, (hi >> shift) + 1))
        lo, hi = next_lo, next_hi
        shift += step
    return out


# ---------------------------------------------------------------- the dense leg's plan


@dataclass(frozen=True)
class DensePlan:
    exact: bool
    ef_search: int


EXACT_VECTORS_PER_EF = 25
"""Exact search over this many allowed vectors costs about what one unit of efSearch costs a
filtered index search (measured, 384-d, one thread: exact ~0.2 us a vector; HNSW with an id
selector ~5 us an ef, 6.5 ms at ef 1,280 on 300 k vectors; IVF at 10 % of 1 M 4.5 ms against
exact's 22.6)."""
MAX_FILTER_EF = 2048


def dense_plan(allowed: int, live: int, top_k: int, ef_search: int, exact_max: int) -> DensePlan:
    """Exact search over the allowed ids, or the index with an id selector and an efSearch
    raised as the filter's selectivity falls (FIELD-NOTES: a fixed ef recalls 0.13-0.56 at 1 %),
    whichever costs less: exact grows with the allowed vectors, the index with that efSearch.
    So the same share goes exact in a small partition and to the index in a large one.

    `exact_max`: up to this many allowed vectors exact search is cheap whatever the share."""
    if live <= 0 or allowed <= 0:
        return DensePlan(exact=True, ef_search=0)
    selectivity = min(1.0, allowed / live)
    ef = math.ceil(max(ef_search, top_k) / selectivity)
    if allowed <= exact_max or allowed <= EXACT_VECTORS_PER_EF * ef:
        return DensePlan(exact=True, ef_search=0)
    return DensePlan(exact=False, ef_search=min(MAX_FILTER_EF, ef))


class TermPostings:
    """Filter terms -> chunk ids of one tenant, for the dense leg to select allowed ids.

    The selection of an expression is kept until the next write (a user's principals and
    filters repeat across queries), as one frozenset object: the partitions key their own
    id-selector caches on it, and a frozenset hashes once."""

    CACHED = 16

    def __init__(self) -> None:
        self._postings: dict[str, set[str]] = {}
        self._terms: dict[str, frozenset[str]] = {}
        self._selected: dict[TermExpr, frozenset[str]] = {}
        self._writes = 0  # a selection that raced a write (another thread) is not kept

    def __len__(self) -> int:
        return len(self._terms)

    def add(self, chunk: Chunk) -> None:
        self.remove(chunk.chunk_id)
        terms = chunk_terms(chunk)
        self._terms[chunk.chunk_id] = terms
        for term in terms:
            self._postings.setdefault(term, set()).add(chunk.chunk_id)
        self._writes += 1
        self._selected.clear()

    def remove(self, chunk_id: str) -> None:
        for term in self._terms.pop(chunk_id, ()):
            ids = self._postings[term]
            ids.discard(chunk_id)
            if not ids:
                del self._postings[term]
        self._writes += 1
        self._selected.clear()

    def select(self, expr: TermExpr) -> frozenset[str]:
        found = self._selected.get(expr)
        if found is None:
            writes = self._writes
            found = frozenset(select(expr, self._postings))
            if writes == self._writes:
                if len(self._selected) >= self.CACHED:
                    self._selected.pop(next(iter(self._selected)), None)
                self._selected[expr] = found
        return found
