import pytest

from ragindex.errors import InvalidInput
from ragindex.hashing import chunk_id, content_hash, shard_for
from ragindex.types import Document, validate_tenant


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
