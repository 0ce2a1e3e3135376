"""Test collections (corpus, queries, graded judgments) and their Cranfield and BEIR files.

A collection is plain data, so evaluators stay pure and any store can be measured by injecting
its search. Loaders check every line and raise `CollectionError` naming the file and line, so a
bad collection fails before anything is ingested or measured.

Tenancy: a document and a query may carry a tenant (absent means the default tenant). A query
asked as tenant T may only be credited with T's documents, so a judgment pairing a query with a
document of another tenant is an error at load time, never silently ignored: such a judgment
could never be retrieved, and ignoring it would hide a mislabelled golden set.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragindex.app.loading import collapse, read_smart
from ragindex.errors import InvalidInput
from ragindex.types import ID_PART_RE, Document, validate_tenant

DEFAULT_BEIR_DIR = Path("data/beir/cranfield")
"""Where `cranfield_to_beir` writes by default: under the git-ignored /data/ of the repo."""

QRELS_HEADER = ("query-id", "corpus-id", "score")
_SPLIT_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INT_RE = re.compile(r"^-?[0-9]+$")
_QID_RE = re.compile(r"^\S{1,256}$")


class CollectionError(InvalidInput):
    """A collection is missing or malformed; the message names the file and line when known."""


@dataclass(frozen=True)
class CorpusDoc:
    """One judged document. Text may be empty (Cranfield has two empty records)."""

    doc_id: str
    title: str
    text: str
    tenant: str | None = None

    def to_document(self, source: str) -> Document:
        """The ragindex Document this record is ingested as: source=<collection name>."""
        return Document(source=source, doc_id=self.doc_id, title=self.title, text=self.text)


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    tenant: str | None = None


@dataclass(frozen=True)
class Collection:
    """Corpus, queries and judgments (qid -> {doc_id: gain}); validated on construction."""

    name: str
    corpus: dict[str, CorpusDoc]
    queries: dict[str, Query]
    qrels: dict[str, dict[str, int]]

    def __post_init__(self) -> None:
        problem = _collection_problem(self)
        if problem:
            raise CollectionError(f"collection {self.name!r}: {problem}")

    def judged_queries(self) -> list[str]:
        """Query ids with at least one relevant (gain > 0) judgment, in query order."""
        return [
            qid
            for qid in self.queries
            if any(gain > 0 for gain in self.qrels.get(qid, {}).values())
        ]


def _tenant_problem(tenant: object) -> str | None:
    if tenant is None:
        return None
    try:
        validate_tenant(tenant)
    except InvalidInput as exc:
        return str(exc)
    return None


def _doc_id_problem(doc_id: object) -> str | None:
    if not isinstance(doc_id, str) or not ID_PART_RE.fullmatch(doc_id):
        return (
            f"document id {doc_id!r} is malformed: 1-256 characters without whitespace,"
            " ':' or '/' (it becomes a ragindex doc_id)"
        )
    return None


def _qid_problem(qid: object) -> str | None:
    if not isinstance(qid, str) or not _QID_RE.match(qid):
        return f"query id {qid!r} is malformed: 1-256 characters without whitespace"
    return None


def _tenant_label(tenant: str | None) -> str:
    return f"tenant {tenant!r}" if tenant is not None else "the default tenant"


def judgment_problem(
    qid: str,
    doc_id: str,
    gain: object,
    queries: Mapping[str, Query],
    corpus: Mapping[str, CorpusDoc],
) -> str | None:
    """Why one judgment is invalid (unknown ids, non-integer gain, cross-tenant), or None."""
    if qid not in queries:
        return f"judgment names unknown query id {qid!r}"
    if doc_id not in corpus:
        return f"judgment names unknown corpus id {doc_id!r}"
    if isinstance(gain, bool) or not isinstance(gain, int):
        return f"score {gain!r} for query {qid!r}, document {doc_id!r} is not an integer"
    q_tenant, d_tenant = queries[qid].tenant, corpus[doc_id].tenant
    if q_tenant != d_tenant:
        return (
            f"query {qid!r} ({_tenant_label(q_tenant)}) is judged against document {doc_id!r}"
            f" of {_tenant_label(d_tenant)}: a query is only credited with its own tenant's"
            " documents"
        )
    return None


def _collection_problem(c: Collection) -> str | None:
    if not isinstance(c.name, str) or not ID_PART_RE.fullmatch(c.name):
        return "name must be 1-256 characters without whitespace, ':' or '/' (it is the source)"
    if not c.corpus:
        return "corpus is empty"
    if not c.queries:
        return "there are no queries"
    for key, doc in c.corpus.items():
        problem = _doc_id_problem(key) or _tenant_problem(doc.tenant)
        if problem or key != doc.doc_id:
            return problem or f"corpus key {key!r} differs from its doc_id {doc.doc_id!r}"
    for key, query in c.queries.items():
        problem = _qid_problem(key)
        if problem or key != query.qid:
            return problem or f"queries key {key!r} differs from its qid {query.qid!r}"
        if not query.text.strip():
            return f"query {key!r} has empty text"
        problem = _tenant_problem(query.tenant)
        if problem:
            return problem
    for qid, judged in c.qrels.items():
        for doc_id, gain in judged.items():
            problem = judgment_problem(qid, doc_id, gain, c.queries, c.corpus)
            if problem:
                return problem
    return None


# ---------------------------------------------------------------------------- file reading


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise CollectionError(f"{path}: file not found")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise CollectionError(
            f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})"
        ) from exc


def _read_jsonl(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line, checking JSON and string fields."""
    for lineno, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CollectionError(f"{where}: bad JSON: {exc.msg} (column {exc.colno})") from exc
        if not isinstance(obj, dict):
            raise CollectionError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        missing = [name for name in required if name not in obj]
        if missing:
            raise CollectionError(f"{where}: missing field(s) {', '.join(missing)}")
        for name in (*required, "title"):
            if name in obj and not isinstance(obj[name], str):
                raise CollectionError(f"{where}: field {name} must be a string")
        problem = _tenant_problem(obj.get("tenant"))
        if problem:
            raise CollectionError(f"{where}: {problem}")
        yield lineno, obj


def read_beir_corpus(path: Path) -> dict[str, CorpusDoc]:
    """corpus.jsonl: `_id` and `text` required, `title` and `tenant` optional."""
    corpus: dict[str, CorpusDoc] = {}
    first_line: dict[str, int] = {}
    for lineno, obj in _read_jsonl(path, ("_id", "text")):
        doc_id = obj["_id"]
        problem = _doc_id_problem(doc_id)
        if problem:
            raise CollectionError(f"{path}:{lineno}: {problem}")
        if doc_id in corpus:
            raise CollectionError(
                f"{path}:{lineno}: duplicate document id {doc_id!r} (first on line"
                f" {first_line[doc_id]})"
            )
        first_line[doc_id] = lineno
        corpus[doc_id] = CorpusDoc(doc_id, obj.get("title", ""), obj["text"], obj.get("tenant"))
    if not corpus:
        raise CollectionError(f"{path}: no documents")
    return corpus


def read_beir_queries(path: Path, *, allow_missing: bool = False) -> dict[str, Query]:
    """queries.jsonl: `_id` and non-empty `text` required, `tenant` optional."""
    if allow_missing and not path.exists():
        return {}
    queries: dict[str, Query] = {}
    first_line: dict[str, int] = {}
    for lineno, obj in _read_jsonl(path, ("_id", "text")):
        qid = obj["_id"]
        problem = _qid_problem(qid)
        if problem:
            raise CollectionError(f"{path}:{lineno}: {problem}")
        if qid in queries:
            raise CollectionError(
                f"{path}:{lineno}: duplicate query id {qid!r} (first on line {first_line[qid]})"
            )
        if not obj["text"].strip():
            raise CollectionError(f"{path}:{lineno}: query {qid!r} has empty text")
        first_line[qid] = lineno
        queries[qid] = Query(qid, obj["text"], obj.get("tenant"))
    if not queries and not allow_missing:
        raise CollectionError(f"{path}: no queries")
    return queries


def read_beir_qrels(
    path: Path,
    queries: Mapping[str, Query],
    corpus: Mapping[str, CorpusDoc],
    *,
    allow_missing: bool = False,
) -> dict[str, dict[str, int]]:
    """qrels/<split>.tsv: header `query-id corpus-id score`, then one integer judgment a line."""
    if allow_missing and not path.exists():
        return {}
    lines = _read_lines(path)
    if not lines or tuple(lines[0].split("\t")) != QRELS_HEADER:
        raise CollectionError(
            f"{path}:1: expected the header {chr(9).join(QRELS_HEADER)!r} (tab-separated)"
        )
    qrels: dict[str, dict[str, int]] = {}
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        fields = line.split("\t")
        if len(fields) != 3:
            raise CollectionError(f"{where}: expected 3 tab-separated fields, got {len(fields)}")
        qid, doc_id, score = (field.strip() for field in fields)
        if not _INT_RE.match(score):
            raise CollectionError(f"{where}: score {score!r} is not an integer")
        problem = judgment_problem(qid, doc_id, int(score), queries, corpus)
        if problem:
            raise CollectionError(f"{where}: {problem}")
        if doc_id in qrels.get(qid, {}):
            raise CollectionError(f"{where}: duplicate judgment of {doc_id!r} for query {qid!r}")
        qrels.setdefault(qid, {})[doc_id] = int(score)
    if not qrels and not allow_missing:
        raise CollectionError(f"{path}: no judgments")
    return qrels


def beir_paths(directory: str | os.PathLike[str], split: str = "test") -> tuple[Path, Path, Path]:
    """(corpus.jsonl, queries.jsonl, qrels/<split>.tsv) of a BEIR directory."""
    if not _SPLIT_RE.match(split):
        raise CollectionError(f"split {split!r} is malformed: use letters, digits, '_' or '-'")
    root = Path(directory)
    return root / "corpus.jsonl", root / "queries.jsonl", root / "qrels" / f"{split}.tsv"


def load_beir(
    directory: str | os.PathLike[str], name: str | None = None, split: str = "test"
) -> Collection:
    """Load a BEIR-layout collection; `name` (the ingest source) defaults to the folder name."""
    corpus_path, queries_path, qrels_path = beir_paths(directory, split)
    root = Path(directory)
    if not root.is_dir():
        raise CollectionError(f"{root}: collection directory not found")
    corpus = read_beir_corpus(corpus_path)
    queries = read_beir_queries(queries_path)
    qrels = read_beir_qrels(qrels_path, queries, corpus)
    return Collection(name or root.resolve().name, corpus, queries, qrels)


def write_lines_atomic(path: Path, lines: list[str]) -> None:
    """Write the whole file beside its target, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(tmp, path)


def write_corpus(docs: Iterable[CorpusDoc], root: Path) -> int:
    """Write `root/corpus.jsonl` atomically; a document id seen twice is refused. Returns how
    many documents were written."""
    unique: dict[str, CorpusDoc] = {}
    for doc in docs:
        if doc.doc_id in unique:
            raise CollectionError(f"duplicate document id {doc.doc_id}")
        unique[doc.doc_id] = doc
    write_lines_atomic(root / "corpus.jsonl", [corpus_line(d) for d in unique.values()])
    return len(unique)


def corpus_line(doc: CorpusDoc) -> str:
    obj: dict[str, str] = {"_id": doc.doc_id, "title": doc.title, "text": doc.text}
    if doc.tenant is not None:
        obj["tenant"] = doc.tenant
    return json.dumps(obj, ensure_ascii=False)


def query_line(query: Query) -> str:
    obj = {"_id": query.qid, "text": query.text}
    if query.tenant is not None:
        obj["tenant"] = query.tenant
    return json.dumps(obj, ensure_ascii=False)


def qrels_lines(qrels: Mapping[str, Mapping[str, int]]) -> list[str]:
    return [
        f"{qid}\t{doc_id}\t{gain}"
        for qid, judged in qrels.items()
        for doc_id, gain in judged.items()
    ]


def export_beir(
    collection: Collection, directory: str | os.PathLike[str], split: str = "test"
) -> Path:
    """Write the collection in BEIR layout (tenant fields only where set); returns the folder."""
    corpus_path, queries_path, qrels_path = beir_paths(directory, split)
    write_lines_atomic(corpus_path, [corpus_line(doc) for doc in collection.corpus.values()])
    write_lines_atomic(queries_path, [query_line(q) for q in collection.queries.values()])
    write_lines_atomic(qrels_path, ["\t".join(QRELS_HEADER), *qrels_lines(collection.qrels)])
    return Path(directory)


# ------------------------------------------------------------------------------- Cranfield


def load_cranfield(directory: str | os.PathLike[str], name: str = "cranfield") -> Collection:
    """Load the SMART-format Cranfield files (see the data folder's README for the mapping).

    Queries are numbered 1..225 by their position in cran.qry (the judgments use positions,
    not the file's .I ids); gain = 5 - code for codes 1..4; lines with code -1 are ignored.
    """
    root = Path(directory)
    docs_path, queries_path, qrels_path = (
        root / "cran.all.1400",
        root / "cran.qry",
        root / "cranqrel",
    )
    corpus: dict[str, CorpusDoc] = {}
    for rec in read_smart(docs_path, _read_lines(docs_path), CollectionError):
        doc_id = str(int(rec.rid))
        if doc_id in corpus:
            raise CollectionError(f"{docs_path}:{rec.lineno}: duplicate document id {doc_id}")
        text = "\n".join(rec.fields.get(".W", [])).strip()
        corpus[doc_id] = CorpusDoc(doc_id, collapse(rec.fields.get(".T", [])), text)
    if not corpus:
        raise CollectionError(f"{docs_path}: no documents")
    queries: dict[str, Query] = {}
    for position, rec in enumerate(
        read_smart(queries_path, _read_lines(queries_path), CollectionError), start=1
    ):
        text = collapse(rec.fields.get(".W", []))
        if not text:
            raise CollectionError(f"{queries_path}:{rec.lineno}: query {rec.rid} has empty text")
        queries[str(position)] = Query(str(position), text)
    if not queries:
        raise CollectionError(f"{queries_path}: no queries")
    qrels: dict[str, dict[str, int]] = {}
    for lineno, line in enumerate(_read_lines(qrels_path), start=1):
        if not line.strip():
            continue
        where = f"{qrels_path}:{lineno}"
        fields = line.split()
        if len(fields) != 3 or not all(_INT_RE.match(f) for f in fields):
            raise CollectionError(f"{where}: expected 'query_position doc_id code' as integers")
        qid, doc_id, code = str(int(fields[0])), str(int(fields[1])), int(fields[2])
        if code == -1:
            continue
        if not 1 <= code <= 4:
            raise CollectionError(f"{where}: relevance code {code} is not one of -1, 1, 2, 3, 4")
        problem = judgment_problem(qid, doc_id, 5 - code, queries, corpus)
        if problem:
            raise CollectionError(f"{where}: {problem}")
        if doc_id in qrels.get(qid, {}):
            raise CollectionError(f"{where}: duplicate judgment of {doc_id} for query {qid}")
        qrels.setdefault(qid, {})[doc_id] = 5 - code
    return Collection(name, corpus, queries, qrels)


def load_collection(
    directory: str | os.PathLike[str], name: str | None = None, split: str = "test"
) -> Collection:
    """Load a folder in whichever layout it holds (Cranfield SMART files or BEIR), for the CLI."""
    root = Path(directory)
    if (root / "cran.all.1400").is_file():
        return load_cranfield(root, name or "cranfield")
    if (root / "corpus.jsonl").is_file():
        return load_beir(root, name, split)
    raise CollectionError(
        f"{root}: neither a Cranfield folder (cran.all.1400) nor a BEIR folder (corpus.jsonl)"
    )


def cranfield_to_beir(
    source_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] = DEFAULT_BEIR_DIR
) -> Path:
    """Convert the Cranfield files to BEIR layout (default under the git-ignored data/)."""
    return export_beir(load_cranfield(source_dir), out_dir)
