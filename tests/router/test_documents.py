"""Reading documents back and paging, without a server: the cursors (their syntax is the one
the OpenAPI document states), the order a search pages through, the bounded delete decision,
and the HTTP layer's answers over a backend of plain data (every refusal changes nothing)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ragindex.errors import InvalidInput, TooManyMatches
from ragindex.router import SearchResult, TokenVerifier, create_app, create_token
from ragindex.router.documents import (
    LIST_CURSOR_PATTERN,
    SEARCH_CURSOR_MAX_CHARS,
    SEARCH_DEPTH,
    DocumentPage,
    Paged,
    bounded_deletes,
    decode_list_cursor,
    decode_search_cursor,
    document_view,
    encode_list_cursor,
    encode_search_cursor,
    merge_summaries,
    page_documents,
    search_cursor_pattern,
    sort_key,
)
from ragindex.router.query import Access
from ragindex.types import Chunk, Hit

GEN = "0a1b2c3d"
CHUNK_IDS = ["wiki:a:0", "1.2:3.4:5", "s:d.0:12", "wiki:volcano.e-05:7"]


@pytest.mark.parametrize("count", [1, 4, SEARCH_DEPTH])
def test_a_search_cursor_decodes_to_what_was_paged_and_matches_the_stated_syntax(
    count: int,
) -> None:
    ids = [CHUNK_IDS[n % 4] + str(n) for n in range(count)]
    paged = Paged().adding(ids)
    cursor = encode_search_cursor(GEN, paged)
    assert decode_search_cursor(cursor, GEN) == paged
    assert all(i in paged for i in ids) and "wiki:never:0" not in paged
    assert len(cursor) <= SEARCH_CURSOR_MAX_CHARS
    assert re.match(search_cursor_pattern(GEN), cursor)
    assert re.match(search_cursor_pattern(), cursor)
    assert not re.match(search_cursor_pattern("ffffffff"), cursor)


def test_a_search_cursor_of_another_generation_or_malformed_is_refused() -> None:
    paged = Paged().adding(["wiki:a:0"])
    cursor = encode_search_cursor(GEN, paged)
    with pytest.raises(InvalidInput, match="generation 0a1b2c3d, this index serves ffffffff"):
        decode_search_cursor(cursor, "ffffffff")
    assert decode_search_cursor(cursor, None) == paged  # no generation: any
    for bad in (
        "",
        "s2/0a1b2c3d/",  # nothing paged
        cursor + "x",  # not whole hashes
        cursor.replace("s2/", "s1/"),
        cursor.replace(GEN, GEN.upper()),
        cursor + "/",
        cursor[:-1] + "=",
        "s2/0a1b2c3d/" + "A" * 8 * (SEARCH_DEPTH + 1),
        "s1/0a1b2c3d/0.5/wiki:a:0",  # the old (score, chunk id) syntax
    ):
        with pytest.raises(InvalidInput, match="cursor"):
            decode_search_cursor(bad, GEN)


def test_a_list_cursor_decodes_to_its_key_and_bad_ones_are_refused() -> None:
    cursor = encode_list_cursor(("wiki", "a.b"))
    assert re.match(LIST_CURSOR_PATTERN, cursor)
    assert decode_list_cursor(cursor) == ("wiki", "a.b")
    for bad in ("", "wiki:a.b", "d1:wiki", "d1:wiki:a:b", "d1:wi ki:a", "d2:wiki:a"):
        with pytest.raises(InvalidInput, match="cursor"):
            decode_list_cursor(bad)


def next_page(hits: list[tuple[float, str]], paged: Paged, k: int) -> list[tuple[float, str]]:
    """A page as the engine cuts it: the best hits in the search's order not paged yet."""
    return [h for h in sorted(hits, key=lambda h: sort_key(*h)) if h[1] not in paged][:k]


def test_pages_of_tied_scores_follow_one_total_order_without_repeats() -> None:
    hits = [(0.5, f"s:d{i}:0") for i in range(5)] + [(0.25, "a:b:0"), (0.75, "z:z:0")]
    pages, paged = [], Paged()
    while True:
        pages.append(next_page(hits, paged, 2))
        if len(pages[-1]) < 2:
            break
        paged = paged.adding(c for _, c in pages[-1])
    flat = [h for page in pages for h in page]
    assert flat == [(0.75, "z:z:0")] + [(0.5, f"s:d{i}:0") for i in range(5)] + [(0.25, "a:b:0")]
    assert [len(p) for p in pages] == [2, 2, 2, 1]


def test_a_write_between_pages_never_repeats_a_hit_or_hides_one_still_in_the_results() -> None:
    hits = [(1.0 - i / 10, f"s:d{i}:0") for i in range(6)]
    first = next_page(hits, Paged(), 3)
    paged = Paged().adding(c for _, c in first)
    # a new hit ranked among the paged ones, one after them; a paged one deleted; a hit not
    # paged yet rises above the paged ones and a paged one falls below the rest (BM25's
    # statistics moved by the write)
    changed = [(0.95, "new:x:0"), (0.55, "new:y:0"), (0.85, "s:d1:0"), (0.1, "s:d2:0")]
    changed += [(1.5, "s:d5:0"), (0.7, "s:d3:0"), (0.6, "s:d4:0")]
    second = next_page(changed, paged, 10)
    assert not {c for _, c in second} & {c for _, c in first}
    assert [c for _, c in second] == ["s:d5:0", "new:x:0", "s:d3:0", "s:d4:0", "new:y:0"]


SUMMARIES = {
    ("wiki", "b"): (2, "B", None),
    ("wiki", "a"): (1, "A", "2024-01-01"),
    ("hr", "z"): (3, "Z", None),
}


def test_document_pages_run_in_key_order_and_end_with_no_cursor() -> None:
    first = page_documents(SUMMARIES, None, 2)
    assert [(d.source, d.doc_id) for d in first.documents] == [("hr", "z"), ("wiki", "a")]
    assert first.next_after == ("wiki", "a")
    last = page_documents(SUMMARIES, first.next_after, 2)
    assert [(d.source, d.doc_id, d.chunks) for d in last.documents] == [("wiki", "b", 2)]
    assert last.next_after is None
    assert page_documents(SUMMARIES, None, 3).next_after is None  # exactly all: no next page
    assert page_documents(SUMMARIES, ("zzz", "z"), 5) == DocumentPage([], None)
    for bad in (0, 1001):
        with pytest.raises(InvalidInput, match="limit"):
            page_documents(SUMMARIES, None, bad)


def test_summaries_of_a_document_across_shards_add_up() -> None:
    merged = merge_summaries([{("w", "a"): (2, "A", None)}, {("w", "a"): (3, "A", None)}, {}])
    assert merged == {("w", "a"): (5, "A", None)}


def test_a_bounded_delete_takes_all_it_matched_or_none() -> None:
    assert bounded_deletes(SUMMARIES, 3) == [("hr", "z"), ("wiki", "a"), ("wiki", "b")]
    assert bounded_deletes({}, 1) == []
    with pytest.raises(TooManyMatches, match="matches 3 documents, more than max_documents"):
        bounded_deletes(SUMMARIES, 2)
    with pytest.raises(InvalidInput):
        bounded_deletes(SUMMARIES, 0)


def chunk(n: int, acl: tuple[str, ...] | None = ("group:eng", "group:ops")) -> Chunk:
    return Chunk(
        "t", f"wiki:a:{n}", "wiki", "a", n, "A", f"text {n}", f"h{n}", acl=acl, metadata={"x": 1}
    )


def test_a_document_view_orders_its_chunks_and_shows_only_the_callers_acl() -> None:
    view = document_view([chunk(2), chunk(0), chunk(1)], frozenset({"group:eng", "user:x"}))
    assert view is not None
    assert [c.n for c in view.chunks] == [0, 1, 2]
    assert view.acl == ["group:eng"] and view.metadata == {"x": 1} and view.title == "A"
    operator = document_view([chunk(0)], None)
    assert operator is not None and operator.acl == ["group:eng", "group:ops"]
    public = document_view([chunk(0, acl=None)], frozenset())
    assert public is not None and public.acl is None
    assert document_view([], None) is None


# ---------------------------------------------------------------- the HTTP layer, no server


OPEN = Chunk("t", "wiki:open:0", "wiki", "open", 0, "Open", "open text", "ho")


class Backend:
    """Plain data for the HTTP layer: a tenant's chunks, and what was asked of it."""

    def __init__(self) -> None:
        self.chunks = {"t": [chunk(1), chunk(0), OPEN]}
        self.deleted: list[tuple[str, str]] = []
        self.searched: list[Any] = []

    def _readable(self, tenant_id: str, access: Access) -> list[Chunk]:
        return [c for c in self.chunks.get(tenant_id, []) if access.allows(c)]

    async def document(self, tenant_id: str, source: str, doc_id: str, access: Access) -> Any:
        readable = self._readable(tenant_id, access)
        return [c for c in readable if (c.source, c.doc_id) == (source, doc_id)]

    async def list_documents(self, tenant_id: str, access: Access, after: Any, limit: int) -> Any:
        summaries: dict[tuple[str, str], tuple[int, str, str | None]] = {}
        for c in self._readable(tenant_id, access):
            had = summaries.get((c.source, c.doc_id), (0, "", None))
            summaries[(c.source, c.doc_id)] = (had[0] + 1, c.title, c.updated)
        return page_documents(summaries, after, limit)

    async def delete_matching(
        self, tenant_id: str, access: Access, max_documents: int, wait_s: float | None
    ) -> dict[str, Any]:
        matched = {(c.source, c.doc_id) for c in self._readable(tenant_id, access)}
        keys = bounded_deletes(matched, max_documents)
        self.deleted += keys
        accepted = [
            {"source": s, "doc_id": d, "partition": 0, "offset": i} for i, (s, d) in enumerate(keys)
        ]
        return {"accepted": accepted, "applied": None if wait_s is None else True}

    async def search(self, tenant_id: str, *args: Any) -> SearchResult:
        _query, k, _mode, _rerank, access, paged = args
        self.searched.append(paged)
        paged = paged or Paged()
        readable = sorted(self._readable(tenant_id, access), key=lambda c: c.chunk_id)
        hits = [Hit(c, 0.5, {"dense": i + 1}) for i, c in enumerate(readable)]
        hits = [h for h in hits if h.chunk.chunk_id not in paged][:k]
        more = paged.adding(h.chunk.chunk_id for h in hits) if len(hits) == k else None
        return SearchResult(hits, next_paged=more)


Api = tuple[TestClient, Backend, dict[str, dict[str, str]]]


@pytest.fixture
def api(tmp_path: Path) -> Api:
    backend = Backend()
    app = create_app(backend, TokenVerifier(tmp_path), cursor_generation=GEN)  # type: ignore[arg-type]
    tokens = {
        "eng": create_token(tmp_path, "t", ["group:eng"]),
        "none": create_token(tmp_path, "t"),
        "other": create_token(tmp_path, "u", ["group:eng"]),
    }
    headers = {name: {"Authorization": f"Bearer {t}"} for name, t in tokens.items()}
    return TestClient(app), backend, headers


def is_problem(r: Any, status: int, code: str) -> bool:
    body = r.json()
    return (
        r.status_code == status
        and r.headers["content-type"].startswith("application/problem+json")
        and body["code"] == code
        and body["type"] == f"urn:ragindex:problem:{code}"
    )


def test_get_document_as_indexed_or_404_alike_for_absent_unreadable_and_other_tenants(
    api: Api,
) -> None:
    client, _, h = api
    r = client.get("/v1/documents/wiki/a", headers=h["eng"])
    assert r.status_code == 200, r.text
    doc = r.json()
    assert [c["chunk_id"] for c in doc["chunks"]] == ["wiki:a:0", "wiki:a:1"]
    assert [c["content_hash"] for c in doc["chunks"]] == ["h0", "h1"]
    assert doc["acl"] == ["group:eng"] and doc["title"] == "A" and doc["metadata"] == {"x": 1}
    answers = [
        client.get("/v1/documents/wiki/a", headers=h["none"]),  # ACL'd: not this token's
        client.get("/v1/documents/wiki/a", headers=h["other"]),  # another tenant
        client.get("/v1/documents/wiki/nothing", headers=h["eng"]),  # absent
    ]
    assert all(is_problem(r, 404, "not-found") for r in answers)
    assert len({r.json()["title"] for r in answers}) == 1
    public = client.get("/v1/documents/wiki/open", headers=h["none"])
    assert public.status_code == 200 and public.json()["acl"] is None


def test_list_pages_through_the_readable_documents_and_refuses_a_bad_cursor(api: Api) -> None:
    client, _, h = api
    first = client.get("/v1/documents", params={"limit": 1}, headers=h["eng"]).json()
    assert [d["doc_id"] for d in first["documents"]] == ["a"]
    assert first["documents"][0]["chunks"] == 2
    second = client.get(
        "/v1/documents", params={"limit": 1, "cursor": first["next_cursor"]}, headers=h["eng"]
    ).json()
    assert [d["doc_id"] for d in second["documents"]] == ["open"]
    assert second["next_cursor"] is None
    only_open = client.get("/v1/documents", headers=h["none"]).json()
    assert [d["doc_id"] for d in only_open["documents"]] == ["open"]
    bad = client.get("/v1/documents", params={"cursor": "nope"}, headers=h["eng"])
    assert is_problem(bad, 400, "invalid-input") and "cursor" in bad.json()["detail"]
    too_many = client.get("/v1/documents", params={"limit": 1001}, headers=h["eng"])
    assert too_many.status_code == 422


def test_delete_by_filter_is_bounded_and_over_its_bound_changes_nothing(api: Api) -> None:
    client, backend, h = api
    wiki = {"field": "source", "eq": "wiki"}
    over = client.post(
        "/v1/documents/delete", json={"filter": wiki, "max_documents": 1}, headers=h["eng"]
    )
    assert is_problem(over, 409, "too-many-matches") and "matches 2 documents" in over.text
    assert backend.deleted == []
    done = client.post(
        "/v1/documents/delete",
        json={"filter": wiki, "max_documents": 2},
        params={"wait": "true"},
        headers=h["eng"],
    )
    assert done.status_code == 202, done.text
    assert [a["doc_id"] for a in done.json()["accepted"]] == ["a", "open"]
    assert done.json()["applied"] is True
    assert backend.deleted == [("wiki", "a"), ("wiki", "open")]
    # the caller's principals bound what it may delete: no ACL'd document for this token
    mine = client.post(
        "/v1/documents/delete", json={"filter": wiki, "max_documents": 5}, headers=h["none"]
    )
    assert [a["doc_id"] for a in mine.json()["accepted"]] == ["open"]
    assert mine.json()["applied"] is None
    no_filter = client.post("/v1/documents/delete", json={"max_documents": 5}, headers=h["eng"])
    assert is_problem(no_filter, 422, "invalid-request") and "filter" in no_filter.text


def test_search_pages_with_its_cursor_and_refuses_another_generations(api: Api) -> None:
    client, backend, h = api
    body = {"query": "q", "k": 1}
    first = client.post("/v1/search", json=body, headers=h["eng"]).json()
    assert [x["chunk_id"] for x in first["hits"]] == ["wiki:a:0"]
    assert first["next_cursor"] == encode_search_cursor(GEN, Paged().adding(["wiki:a:0"]))
    seen = [x["chunk_id"] for x in first["hits"]]
    cursor = first["next_cursor"]
    while cursor is not None:
        page = client.post("/v1/search", json={**body, "cursor": cursor}, headers=h["eng"]).json()
        seen += [x["chunk_id"] for x in page["hits"]]
        cursor = page["next_cursor"]
    assert seen == ["wiki:a:0", "wiki:a:1", "wiki:open:0"]
    asked = len(backend.searched)
    other = encode_search_cursor("ffffffff", Paged().adding(["wiki:a:0"]))
    for bad in (other, "garbage"):
        r = client.post("/v1/search", json={**body, "cursor": bad}, headers=h["eng"])
        assert is_problem(r, 400, "invalid-input") and "cursor" in r.json()["detail"]
    assert len(backend.searched) == asked  # refused before the backend was asked


def test_the_served_schema_states_this_generations_cursor_syntax(api: Api) -> None:
    client, _, _ = api
    doc = client.get("/openapi.json").json()
    cursor = doc["components"]["schemas"]["SearchRequest"]["properties"]["cursor"]
    assert cursor["anyOf"][0]["pattern"] == search_cursor_pattern(GEN)
    params = {p["name"]: p for p in doc["paths"]["/v1/documents"]["get"]["parameters"]}
    assert params["cursor"]["schema"]["pattern"] == LIST_CURSOR_PATTERN
    delete = doc["paths"]["/v1/documents/delete"]["post"]["responses"]
    assert {"202", "409"} <= set(delete)
    assert "404" in doc["paths"]["/v1/documents/{source}/{doc_id}"]["get"]["responses"]


def test_max_documents_is_an_integer_as_json_schema_means_it() -> None:
    from pydantic import ValidationError

    from ragindex.router.api_models import DeleteByFilterRequest

    wiki = {"field": "source", "eq": "wiki"}
    assert (
        DeleteByFilterRequest.model_validate({"filter": wiki, "max_documents": 14.0}).max_documents
        == 14
    )
    for bad in (14.5, 0, 1001, "3", True):
        with pytest.raises(ValidationError):
            DeleteByFilterRequest.model_validate({"filter": wiki, "max_documents": bad})


def test_a_405_allows_every_method_of_the_path(api: Api) -> None:
    client, _, h = api
    r = client.options("/v1/documents", headers=h["eng"])
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    one = client.options("/v1/documents/wiki/a", headers=h["eng"])
    assert one.status_code == 405 and one.headers["allow"] == "DELETE, GET"
