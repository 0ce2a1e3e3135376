"""ACLs, filters, their terms and the dense plan: pure functions, checked against an oracle."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragindex.errors import InvalidInput
from ragindex.filters import (
    MAX_FILTER_EF,
    AnyTerm,
    DensePlan,
    chunk_terms,
    compile_access,
    dense_plan,
    holds,
    matches,
    narrow_principals,
    parse_filter,
    select,
    sortable,
    split_range,
)
from ragindex.types import Chunk, Document


def chunk(**kw: object) -> Chunk:
    base: dict[str, object] = dict(
        tenant_id="t", chunk_id="s:d:0", source="s", doc_id="d", n=0, title="", text="x",
        content_hash="h",
    )  # fmt: skip
    return Chunk(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("lo,hi", [(0, 0), (0, 4095), (5, 5), (17, 300), (255, 256), (1, 4094)])
def test_split_range_covers_exactly(lo: int, hi: int) -> None:
    covered: set[int] = set()
    for shift, prefix in split_range(lo, hi, step=4, bits=12):
        block = range(prefix << shift, (prefix + 1) << shift)
        assert covered.isdisjoint(block)
        covered.update(block)
    assert covered == set(range(lo, hi + 1))


@given(st.integers(0, 4095), st.integers(0, 4095))
def test_split_range_any_bounds(a: int, b: int) -> None:
    lo, hi = min(a, b), max(a, b)
    pairs = split_range(lo, hi, step=4, bits=12)
    covered = {v for s, p in pairs for v in range(p << s, (p + 1) << s)}
    assert covered == set(range(lo, hi + 1))
    assert len(pairs) <= 2 * 15 * 3 + 16  # few terms, whatever the width


@given(st.lists(st.floats(allow_nan=False), min_size=2, max_size=2))
def test_sortable_preserves_order(pair: list[float]) -> None:
    a, b = pair
    assert (a < b) == (sortable(a) < sortable(b))
    assert (a == b) == (sortable(a) == sortable(b))


def test_filter_errors_say_what_is_wrong() -> None:
    cases = {
        "filter.and must be a list of 1-16 filters": {"and": []},
        "needs `field`": {"field": "colour", "eq": 1},
        "operators are": {"field": "source", "like": "x"},
        "stand alone": {"field": "source", "eq": "a", "in": ["b"]},
        "`source` takes `eq` or `in`": {"field": "source", "gte": 1},
        "must be a finite number": {"field": "metadata.n", "gte": "ten"},
        "RFC 3339": {"field": "updated", "gte": "yesterday"},
        "nest at most": {"and": [{"and": [{"and": [{"field": "source", "eq": "a"}]}]}]},
        r"filter.and must be a list of 1-16": {"and": [{"field": "source", "eq": "a"}] * 17},
        r"filter.or\[0\].and must be a list of 1-4": {
            "or": [{"and": [{"field": "source", "eq": "a"}] * 5}]
        },
        "at most one lower": {"field": "metadata.n", "gte": 1, "gt": 2},
    }
    for message, data in cases.items():
        with pytest.raises(InvalidInput, match=message):
            parse_filter(data)


def test_acl_and_principals() -> None:
    with pytest.raises(InvalidInput, match="principal"):
        Document(source="s", doc_id="d", title="", text="x", acl=("alice",))
    with pytest.raises(InvalidInput, match="non-empty list"):
        Document(source="s", doc_id="d", title="", text="x", acl=())
    doc = Document(source="s", doc_id="d", title="", text="x", acl=["group:b", "user:a"])  # type: ignore[arg-type]
    assert doc.acl == ("group:b", "user:a")
    assert narrow_principals({"user:a", "group:b"}, None) == {"user:a", "group:b"}
    assert narrow_principals({"user:a", "group:b"}, ["user:a"]) == {"user:a"}
    with pytest.raises(PermissionError, match="group:c"):
        narrow_principals({"user:a"}, ["group:c"])


def test_examples() -> None:
    c = chunk(
        source="wiki", updated="2024-05-01T12:00:00Z", acl=("group:eng",),
        metadata={"lang": "en", "year": 2021, "tags": ["a", "b"], "ok": True},
    )  # fmt: skip
    eng = {"group:eng"}
    for flt, expected in [
        ({"field": "source", "eq": "wiki"}, True),
        ({"field": "source", "in": ["web", "wiki"]}, True),
        ({"field": "updated", "gte": "2024-05-01", "lt": "2024-05-02"}, True),
        ({"field": "updated", "gt": "2024-05-01T12:00:00Z"}, False),
        ({"field": "metadata.year", "eq": 2021.0}, True),
        ({"field": "metadata.year", "gte": 2000, "lte": 2021}, True),
        ({"field": "metadata.year", "lt": 2021}, False),
        ({"field": "metadata.year", "gte": 2030, "lte": 2000}, False),  # empty range: nothing
        ({"field": "metadata.tags", "eq": "b"}, True),
        ({"field": "metadata.ok", "eq": True}, True),
        ({"field": "metadata.ok", "eq": 1}, False),
        ({"field": "metadata.missing", "eq": None}, False),
        ({"or": [{"field": "source", "eq": "web"}, {"field": "metadata.lang", "eq": "en"}]}, True),
        (
            {"and": [{"field": "source", "eq": "web"}, {"field": "metadata.lang", "eq": "en"}]},
            False,
        ),
    ]:
        parsed = parse_filter(flt)
        assert matches(c, parsed, eng) is expected, flt
        expr = compile_access(parsed, eng)
        assert expr is not None and holds(expr, chunk_terms(c)) is expected, flt
    assert not matches(c, None, {"user:bob"})
    public_only = compile_access(None, set())
    assert public_only is not None and not holds(public_only, chunk_terms(c))
    assert holds(public_only, chunk_terms(chunk()))  # no ACL: the whole tenant
    assert compile_access(None, None) is None  # the operator's view: nothing to enforce


# ---------------------------------------------------------------- the oracle property

PRINCIPALS = ["user:a", "user:b", "group:x", "group:y"]
scalars = st.one_of(
    st.sampled_from(["en", "de", "fr"]), st.integers(-5, 5), st.floats(-5, 5), st.booleans()
)
chunks = st.builds(
    lambda n, acl, src, day, meta: chunk(
        chunk_id=f"{src}:d{n}:0",
        source=src,
        doc_id=f"d{n}",
        acl=acl,
        metadata=meta,
        updated=None if day is None else f"2024-01-{day:02d}",
    ),
    st.integers(0, 10**6),
    st.one_of(st.none(), st.lists(st.sampled_from(PRINCIPALS), min_size=1, unique=True).map(tuple)),
    st.sampled_from(["web", "wiki", "mail"]),
    st.one_of(st.none(), st.integers(1, 28)),
    st.dictionaries(
        st.sampled_from(["lang", "n", "tags"]),
        st.one_of(scalars, st.lists(scalars, max_size=3)),
        max_size=3,
    ),
)
conditions = st.one_of(
    st.builds(lambda s: {"field": "source", "eq": s}, st.sampled_from(["web", "wiki", "x"])),
    st.builds(
        lambda s: {"field": "source", "in": s},
        st.lists(st.sampled_from(["web", "mail"]), min_size=1),
    ),
    st.builds(
        lambda op, day: {"field": "updated", op: f"2024-01-{day:02d}"},
        st.sampled_from(["gt", "gte", "lt", "lte", "eq"]), st.integers(1, 28),
    ),
    st.builds(
        lambda k, op, v: {"field": f"metadata.{k}", op: v},
        st.sampled_from(["lang", "n", "tags", "none"]), st.sampled_from(["gt", "gte", "lt", "lte"]),
        st.one_of(st.integers(-6, 6), st.floats(-6, 6)),
    ),
    st.builds(
        lambda k, v: {"field": f"metadata.{k}", "in": v},
        st.sampled_from(["lang", "n", "tags"]), st.lists(scalars, min_size=1, max_size=3),
    ),
)  # fmt: skip
nested = st.one_of(
    conditions,
    st.builds(lambda p: {"and": p}, st.lists(conditions, min_size=1, max_size=4)),
    st.builds(lambda p: {"or": p}, st.lists(conditions, min_size=1, max_size=4)),
)
filters = st.one_of(  # every shape the grammar allows, to its full depth
    conditions,
    st.builds(lambda p: {"and": p}, st.lists(nested, min_size=1, max_size=3)),
    st.builds(lambda p: {"or": p}, st.lists(nested, min_size=1, max_size=3)),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(chunks, min_size=1, max_size=12, unique_by=lambda c: c.chunk_id),
    st.one_of(st.none(), filters),
    st.lists(st.sampled_from(PRINCIPALS), unique=True),
)
def test_terms_agree_with_the_oracle(
    corpus: list[Chunk], flt: dict[str, object] | None, principals: list[str]
) -> None:
    parsed = parse_filter(flt)
    expr = compile_access(parsed, principals)
    assert expr is not None
    postings: dict[str, set[str]] = {}
    for c in corpus:
        for term in chunk_terms(c):
            postings.setdefault(term, set()).add(c.chunk_id)
    expected = {c.chunk_id for c in corpus if matches(c, parsed, principals)}
    assert {c.chunk_id for c in corpus if holds(expr, chunk_terms(c))} == expected
    assert select(expr, postings) == expected


# ---------------------------------------------------------------- the dense plan


def test_dense_plan_exact_when_selective_hnsw_with_rising_ef_otherwise() -> None:
    live = 100_000
    assert dense_plan(100, live, 10, 64, 2000) == DensePlan(exact=True, ef_search=0)
    assert dense_plan(1_000, live, 10, 64, 2000).exact
    assert dense_plan(10_000, live, 10, 64, 2000).exact  # 10 %: gathering 10 k is cheap
    half = dense_plan(50_000, live, 10, 64, 2000)
    full = dense_plan(100_000, live, 10, 64, 2000)
    assert not half.exact and not full.exact
    assert full.ef_search == 64 and half.ef_search == 128
    efs = [dense_plan(a, live, 10, 64, 0).ef_search for a in (13_000, 20_000, 40_000, 80_000)]
    assert efs == sorted(efs, reverse=True)  # less allowed, more effort
    assert dense_plan(0, live, 10, 64, 0).exact
    assert dense_plan(5, 10, 10, 64, 2000).exact  # a small partition is always exact


def test_dense_plan_one_share_exact_in_a_small_partition_index_in_a_large() -> None:
    # 10 % of 300 k (30 k vectors) is cheaper exact than at efSearch 1,280; 10 % of 1 M is not
    assert dense_plan(30_000, 300_000, 10, 128, 20_000).exact
    large = dense_plan(100_000, 1_000_000, 10, 128, 20_000)
    assert not large.exact and large.ef_search == 1280
    assert dense_plan(50_000, 1_000_000, 10, 128, 20_000).exact  # 5 %: efSearch would be 2,560
    assert dense_plan(60_000, 1_000_000, 10, 128, 20_000).ef_search == MAX_FILTER_EF


def test_no_terms_match_nothing() -> None:
    assert select(AnyTerm(frozenset()), {"a": {"x"}}) == set()
    expr = compile_access(parse_filter({"field": "source", "eq": "nope"}), [])
    assert expr is not None and not holds(expr, chunk_terms(chunk()))
