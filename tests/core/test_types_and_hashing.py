import pytest

from ragindex.errors import InvalidInput, TooLarge
from ragindex.hashing import chunk_id, content_hash, shard_for
from ragindex.records import docs_records
from ragindex.router.query import validate_search
from ragindex.topics import MAX_RECORD_BYTES
from ragindex.types import (
    MAX_DOCUMENT_CHARS,
    MAX_METADATA_KEYS,
    MAX_METADATA_LIST_ITEMS,
    MAX_METADATA_STRING_CHARS,
    MAX_TITLE_CHARS,
    Document,
    validate_tenant,
)


def test_chunk_ids_and_hashes_are_stable():
    assert chunk_id("wiki", "42", 3) == "wiki:42:3"
    assert content_hash("lift") == content_hash("lift")
    assert content_hash("lift") != content_hash("drag")
    # blake2b, not Python's salted hash(): the value is fixed across processes.
    assert content_hash("") == "cae66941d9efbd404e4d88758ea67670"


def test_shard_routing_is_stable_and_spreads():
    owners = [shard_for("t", f"s:d:{n}", 4) for n in range(400)]
    assert owners == [shard_for("t", f"s:d:{n}", 4) for n in range(400)]
    assert set(owners) == {0, 1, 2, 3}
    with pytest.raises(ValueError):
        shard_for("t", "x", 0)


@pytest.mark.parametrize("bad", ["", " ", "UPPER", "a b", "-lead", "x" * 64, None, 7, "a/b"])
def test_malformed_tenant_ids_are_refused_with_a_message(bad):
    with pytest.raises(InvalidInput, match="tenant_id"):
        validate_tenant(bad)


def test_good_tenant_ids_pass():
    assert validate_tenant("acme-corp_1") == "acme-corp_1"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": ""}, "text is empty"),
        ({"text": "   \n"}, "text is empty"),
        ({"text": "x" * 1_000_001}, "more than the limit"),
        ({"text": "bad \ufffd bytes"}, "not valid UTF-8"),
        ({"doc_id": ""}, "doc_id is required"),
        ({"source": "a:b"}, "source 'a:b' is malformed"),
        ({"title": None}, "title must be a string"),
        ({"metadata": []}, "metadata must be an object"),
    ],
)
def test_bad_documents_are_refused_with_a_clear_message(kwargs, message):
    fields = {"source": "wiki", "doc_id": "1", "title": "t", "text": "body"} | kwargs
    with pytest.raises(InvalidInput, match=message):
        Document(**fields)


@pytest.mark.parametrize("bad", ["docs\n", "a\n", "acme\r\n"])
def test_a_trailing_newline_does_not_slip_past_the_tenant_pattern(bad):
    # `re.match` with `$` accepted "docs\n" (issue #14): the patterns are full matches now.
    with pytest.raises(InvalidInput, match="tenant_id"):
        validate_tenant(bad)


@pytest.mark.parametrize("bad", ["d\n", "d\x85", "d\ufeff", "d\x7f", "\u2028"])
def test_ids_refuse_trailing_newlines_and_every_whitespace_or_control(bad):
    with pytest.raises(InvalidInput, match=r"doc_id .* is malformed"):
        Document("wiki", bad, "t", "body")


def _doc(**kwargs):
    return Document(**({"source": "wiki", "doc_id": "1", "title": "t", "text": "body"} | kwargs))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"title": "x" * (MAX_TITLE_CHARS + 1)}, "title has 513 characters"),
        ({"metadata": {f"k{n}": n for n in range(MAX_METADATA_KEYS + 1)}}, "33 keys"),
        ({"metadata": {"k": "v" * (MAX_METADATA_STRING_CHARS + 1)}}, "more than the limit"),
        ({"metadata": {"k": list(range(MAX_METADATA_LIST_ITEMS + 1))}}, "lists 17 items"),
        ({"metadata": {"k": {"nested": 1}}}, "nested objects and lists are not allowed"),
        ({"metadata": {"k": [[1]]}}, "nested objects and lists are not allowed"),
        ({"metadata": {"k": 2**60}}, "within"),
        ({"metadata": {"k": float("nan")}}, "finite"),
        ({"metadata": {"": 1}}, "keys must be strings"),
        ({"title": "bad \ud800 title"}, "title holds a lone surrogate"),
        ({"text": "bad \udfff text"}, "text holds a lone surrogate"),
        ({"metadata": {"k": "\ud800"}}, "lone surrogate"),
        ({"metadata": {"\udc00": 1}}, "lone surrogate"),
        ({"updated": "yesterday"}, "RFC 3339"),
        ({"updated": "2024-02-30"}, "not a real date"),
        ({"text": "\x1c\x85\ufeff"}, "text is empty"),
    ],
)
def test_oversize_deep_or_non_unicode_fields_are_refused(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        _doc(**kwargs)


def test_fields_at_their_limits_are_accepted():
    doc = _doc(
        title="x" * MAX_TITLE_CHARS,
        updated="2024-05-01T12:00:00.5+02:00",
        metadata={
            **{f"k{n}": n for n in range(MAX_METADATA_KEYS - 2)},
            "list": ["v" * MAX_METADATA_STRING_CHARS] * MAX_METADATA_LIST_ITEMS,
            "null": None,
        },
    )
    assert len(doc.title) == MAX_TITLE_CHARS
    assert _doc(updated="2024-05-01").updated == "2024-05-01"


def test_surrogates_are_refused_for_queries_too():
    with pytest.raises(InvalidInput, match="query holds a lone surrogate"):
        validate_search("lift \ud800", 5, "hybrid")


def test_a_document_over_one_log_record_is_refused_by_name_with_its_batch():
    """Measured in bytes as stored (JSON, UTF-8), not in characters: 1 M emoji take 4 MB."""
    fits = Document("s", "fits", "", "漢" * MAX_DOCUMENT_CHARS)  # 3 MB
    emoji = Document("s", "emoji", "", "😀" * MAX_DOCUMENT_CHARS)
    assert len(docs_records("t", [fits], 2)[0][2] or b"") < MAX_RECORD_BYTES
    with pytest.raises(TooLarge, match="document s:emoji takes 4000"):
        docs_records("t", [fits, emoji], 2)
